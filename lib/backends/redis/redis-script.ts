import { createHash } from 'node:crypto';
import type { RedisClientLike } from './redis-options';
import { bulk, commandHeader, encodedKeys, bulks } from './resp-encoding';

/** What RedisScript reads of an ioredis client: its state and current socket (a Cluster has no `stream`). */
interface ClientState {
  readonly status?: string;
  readonly stream?: object;
}

/** The server no longer has the script (a SCRIPT FLUSH, a restart). */
export function isNoScript(error: unknown): boolean {
  return String((error as Error)?.message).startsWith('NOSCRIPT');
}

/**
 * Sends one call as `EVAL` (`whole`) or `EVALSHA`, and returns what its caller waits on (a
 * promise, or nothing when the answer goes to a callback). `fallBack`: an EVALSHA whose NOSCRIPT
 * reply is answered by the whole script; `onSuccess` is told of a success before whoever waits.
 */
export type SendCall<Sent> = (call: ScriptCall<unknown>, whole: boolean, fallBack: boolean, onSuccess?: () => void) => Sent;

/** A user's client: its own eval and evalsha, with the NOSCRIPT fallback. */
function sendWith(client: RedisClientLike): SendCall<Promise<unknown>> {
  const send: SendCall<Promise<unknown>> = (call, whole, fallBack, onSuccess) => {
    let sent: Promise<unknown> = client[whole ? 'eval' : 'evalsha'](...call.words(whole));
    if (onSuccess) {
      sent = sent.then((reply) => {
        onSuccess();
        return reply;
      });
    }
    return fallBack ? sent.catch((error: unknown) => (isNoScript(error) ? send(call, true, false) : Promise.reject(error))) : sent;
  };
  return send;
}

/**
 * The script without its comment lines, indentation and blank lines: Redis spends time on every
 * call of a script in proportion to the length of its text, comments included (docs/redis.md).
 * A script with a long string or comment (`[[`, `[==[`) is left as written: a line inside one
 * is not code.
 */
export function compactLua(source: string): string {
  if (/\[=*\[/.test(source)) return source;
  return source
    .split('\n')
    .map((line) => line.trim())
    .filter((line) => line !== '' && !line.startsWith('--'))
    .join('\n');
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
  /** The script as sent: `source` without its comment lines and indentation (see compactLua). */
  readonly lua: string;
  readonly sha: string;
  /** `EVALSHA <sha>` and `EVAL <script>` in RESP, encoded once. */
  readonly evalshaWords: string;
  readonly evalWords: string;

  constructor(
    readonly name: string,
    source: string,
  ) {
    const lua = (this.lua = compactLua(source));
    this.sha = createHash('sha1').update(lua).digest('hex');
    this.evalshaWords = bulk('evalsha') + bulk(this.sha);
    this.evalWords = bulk('eval') + bulk(lua);
  }

  /** One call of the script, for one or several connections. */
  call(keys: readonly string[], args: readonly (string | number)[]): ScriptCall<Reply> {
    return new ScriptCall(this, keys, args);
  }

  /** Runs the script on a user's `client`, with the client's own eval and evalsha. */
  run(client: RedisClientLike, keys: readonly string[], args: readonly (string | number)[]): Promise<Reply> {
    return this.runWith(client, this.call(keys, args), sendWith(client)) as Promise<Reply>;
  }

  /**
   * Sends `call` on `client`'s connection with `send` (EVALSHA where the server is known to have
   * the script, else EVAL), and returns what `send` returns.
   */
  runWith<Sent>(client: RedisClientLike, call: ScriptCall<Reply>, send: SendCall<Sent>): Sent {
    const { status, stream } = client as ClientState;
    // Not ready: the command waits in the offline queue, for a server that may have restarted.
    if (status !== 'ready') return send(call, true, false);
    // A Cluster (no one socket), or a socket whose server is known to have the script.
    if (stream === undefined || cachedOnSocket.get(stream)?.has(this.sha)) return send(call, false, true);
    return send(call, true, false, () => this.cachedOn(stream));
  }

  private cachedOn(socket: object): void {
    let cached = cachedOnSocket.get(socket);
    if (!cached) cachedOnSocket.set(socket, (cached = new Set()));
    cached.add(this.sha);
  }
}

/**
 * A script with its keys and arguments. Its words (as ioredis takes them) and their RESP are made
 * at most once, however many connections the call goes to: Redlock sends each call to every master.
 */
export class ScriptCall<Reply> {
  private shaWords?: (string | number)[];
  private wholeWords?: (string | number)[];
  private shaEncoded?: string;
  private wholeEncoded?: string;

  constructor(
    readonly script: RedisScript<Reply>,
    readonly keys: readonly string[],
    readonly args: readonly (string | number)[],
  ) {}

  /** `EVALSHA` (or, `whole`, `EVAL`) and the rest of the command's words. */
  words(whole: boolean): (string | number)[] {
    const { script, keys, args } = this;
    // concat, not spread: a builtin call instead of two iterations through the iterator protocol.
    if (whole) return (this.wholeWords ??= [script.lua, keys.length].concat(keys, args));
    return (this.shaWords ??= [script.sha, keys.length].concat(keys, args));
  }

  /** The whole command in RESP. */
  encoded(whole: boolean): string {
    if (whole) return (this.wholeEncoded ??= this.encode(this.script.evalWords));
    return (this.shaEncoded ??= this.encode(this.script.evalshaWords));
  }

  private encode(scriptWords: string): string {
    const { keys, args } = this;
    return commandHeader(3 + keys.length + args.length) + scriptWords + encodedKeys(keys) + bulks(args);
  }
}
