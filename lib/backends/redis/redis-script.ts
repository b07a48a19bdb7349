import { createHash } from 'node:crypto';
import type { RedisClientLike } from './redis-options';

/**
 * A Lua script run by EVALSHA, falling back to EVAL when the server does not know it yet
 * (NOSCRIPT: first use, after a restart or SCRIPT FLUSH, or on another Cluster node). Unlike
 * ioredis' defineCommand it adds nothing to the client, so a user's client stays untouched.
 */
export class RedisScript<Reply> {
  private readonly sha: string;

  constructor(
    readonly name: string,
    private readonly lua: string,
  ) {
    this.sha = createHash('sha1').update(lua).digest('hex');
  }

  run(client: RedisClientLike, keys: readonly string[], args: readonly (string | number)[]): Promise<Reply> {
    return client.evalsha(this.sha, keys.length, ...keys, ...args).catch((error: unknown) => {
      if (!String((error as Error)?.message).startsWith('NOSCRIPT')) throw error;
      return client.eval(this.lua, keys.length, ...keys, ...args);
    }) as Promise<Reply>;
  }
}
