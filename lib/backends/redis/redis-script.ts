import { createHash } from 'node:crypto';
import type { RedisClientLike } from './redis-options';

/** What RedisScript reads of an ioredis client: its state and current socket (a Cluster has no `stream`). */
interface ClientState {
  readonly status?: string;
  readonly stream?: object;
}

/** Per socket, the scripts the server behind it is known to have cached: a new socket may face a restarted server. */
const cachedOnSocket = new WeakMap<object, Set<string>>();

/**
 * A Lua script run by EVALSHA once the server behind this connection is known to have it, and
 * by EVAL before that (first use, a new connection, commands queued while reconnecting).
 *
 * Why not EVALSHA with a fallback on NOSCRIPT, as ioredis' defineCommand does: the fallback EVAL
 * goes out after the NOSCRIPT reply, behind the commands sent meanwhile, and our scripts rely on
 * their order on one connection (a cancel or give-back sent after an acquire must run after it).
 * After a restart, an acquire's fallback could run after its own give-back and leave an entry
 * nobody owns until its ttl. The fallback stays for a Cluster (no one socket to track) and a
 * SCRIPT FLUSH. Nothing is added to the client, so a user's client stays untouched.
 */
export class RedisScript<Reply> {
  private readonly sha: string;

  constructor(
    readonly name: string,
    private readonly lua: string,
  ) {
    this.sha = createHash('sha1').update(lua).digest('hex');
  }

  /**
   * RedisConnections.runScript's way, for our own connection: whether EVALSHA may go out on this
   * socket now (else EVAL, as run() decides), and the arguments for either.
   */
  isCachedOn(socket: object): boolean {
    return cachedOnSocket.get(socket)?.has(this.sha) === true;
  }

  commandArgs(byHash: boolean, keys: readonly string[], args: readonly (string | number)[]): (string | number)[] {
    return [byHash ? this.sha : this.lua, keys.length, ...keys, ...args];
  }

  run(client: RedisClientLike, keys: readonly string[], args: readonly (string | number)[]): Promise<Reply> {
    const { status, stream } = client as ClientState;
    // A Cluster (no one socket), or a client we cannot see into.
    if (stream === undefined) return this.evalshaOrEval(client, keys, args);
    // Not ready: the command waits in the offline queue, for a server that may have restarted.
    if (status !== 'ready') return this.eval(client, keys, args);
    if (cachedOnSocket.get(stream)?.has(this.sha)) return this.evalshaOrEval(client, keys, args);
    return this.eval(client, keys, args).then((reply) => {
      this.cachedOn(stream);
      return reply;
    });
  }

  private eval(client: RedisClientLike, keys: readonly string[], args: readonly (string | number)[]): Promise<Reply> {
    return client.eval(this.lua, keys.length, ...keys, ...args) as Promise<Reply>;
  }

  private evalshaOrEval(client: RedisClientLike, keys: readonly string[], args: readonly (string | number)[]): Promise<Reply> {
    return client.evalsha(this.sha, keys.length, ...keys, ...args).catch((error: unknown) => {
      if (!String((error as Error)?.message).startsWith('NOSCRIPT')) throw error;
      return this.eval(client, keys, args);
    }) as Promise<Reply>;
  }

  /** An EVAL of this script succeeded on `socket`: its server has it cached. */
  cachedOn(socket: object): void {
    let cached = cachedOnSocket.get(socket);
    if (!cached) cachedOnSocket.set(socket, (cached = new Set()));
    cached.add(this.sha);
  }
}
