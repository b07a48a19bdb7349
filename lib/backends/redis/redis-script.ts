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

  async run(client: RedisClientLike, keys: readonly string[], args: readonly (string | number)[]): Promise<Reply> {
    try {
      return (await client.evalsha(this.sha, keys.length, ...keys, ...args)) as Reply;
    } catch (error) {
      if (!String((error as Error)?.message).startsWith('NOSCRIPT')) throw error;
      return (await client.eval(this.lua, keys.length, ...keys, ...args)) as Reply;
    }
  }
}
