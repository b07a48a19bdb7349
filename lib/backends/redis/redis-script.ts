import { createHash } from 'node:crypto';
import type { RedisClientLike } from './redis-options';

/** What RedisScript reads of an ioredis client: its state and current socket (a Cluster has no `stream`). */
interface ClientState {
  readonly status?: string;
  readonly stream?: object;
}

/** Sends one EVAL or EVALSHA; `onNoScript` (with an EVALSHA) answers for a NOSCRIPT reply. */
export type SendCommand = (name: 'eval' | 'evalsha', args: (string | number)[], onNoScript?: () => Promise<unknown>) => Promise<unknown>;

/** The server no longer has the script (a SCRIPT FLUSH, a restart). */
export function isNoScript(error: unknown): boolean {
  return String((error as Error)?.message).startsWith('NOSCRIPT');
}

/** A client's own eval and evalsha methods, with the NOSCRIPT fallback. */
function sendWith(client: RedisClientLike): SendCommand {
  return (name, args, onNoScript) => {
    const sent = client[name](...args);
    return onNoScript ? sent.catch((error: unknown) => (isNoScript(error) ? onNoScript() : Promise.reject(error))) : sent;
  };
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
   * Runs the script on `client`'s connection, each command sent by `send` (the client's own
   * method by default; RedisConnections sends its own). `onNoScript`, given with an EVALSHA, sends
   * the whole script after a NOSCRIPT reply.
   */
  run(client: RedisClientLike, keys: readonly string[], args: readonly (string | number)[], send: SendCommand = sendWith(client)): Promise<Reply> {
    const { status, stream } = client as ClientState;
    const whole = () => send('eval', [this.lua, keys.length, ...keys, ...args]) as Promise<Reply>;
    // Not ready: the command waits in the offline queue, for a server that may have restarted.
    if (status !== 'ready') return whole();
    // A Cluster (no one socket), or a socket whose server is known to have the script.
    if (stream === undefined || cachedOnSocket.get(stream)?.has(this.sha)) {
      return send('evalsha', [this.sha, keys.length, ...keys, ...args], whole) as Promise<Reply>;
    }
    return whole().then((reply) => {
      this.cachedOn(stream);
      return reply;
    });
  }

  private cachedOn(socket: object): void {
    let cached = cachedOnSocket.get(socket);
    if (!cached) cachedOnSocket.set(socket, (cached = new Set()));
    cached.add(this.sha);
  }
}
