import { Logger } from '@nestjs/common';
import { LockBackendError, LockServerUnreachableError } from '../../errors';
import type { BackendSettings } from '../backend-definition';
import { CommandTimeouts } from './command-timeouts';
import { encodedCommandClass, type EncodedCommandClass, type OwnCommand, type OwnCommandClass, type OwnCommandOptions } from './encoded-command';
import { guardedConnector } from './guarded-connector';
import { loadPeer } from '../load-peer';
import { ReadyWaits } from '../ready-waits';
import { explainTlsError, moreTellingTlsError } from '../tls-errors';
import { redisAddress } from './redis-address';
import type { RedisBackendOptions, RedisClientLike } from './redis-options';
import { isNoScript, type RedisScript, type ScriptCall } from './redis-script';

/** What the backend needs of a connection; ioredis' Redis and Cluster both have it. */
export interface RedisConnection extends RedisClientLike {
  subscribe(...channels: string[]): Promise<unknown>;
  on(event: string, listener: (...args: any[]) => void): unknown;
  removeListener(event: string, listener: (...args: any[]) => void): unknown;
  disconnect(): void;
  /** ioredis' connection state: 'ready' once commands are answered. */
  readonly status?: string;
  /** PING: ioredis' Redis and Cluster (a Cluster asks one of its nodes). */
  ping(): Promise<unknown>;
  sendCommand(command: unknown): unknown;
}

const logger = new Logger('DistributedLock');

/**
 * Told a command's answer: its error (worded as RedisConnections.failure words it), or its reply;
 * `tag` is what the caller gave with the command (Redlock: the master's index).
 */
export type Answered<Reply> = (error: Error | undefined, reply: Reply | undefined, tag: number) => void;

const ignore = (): void => undefined;

/**
 * Calls `answered` from inside ioredis' reply handling: a throw there would leave ioredis'
 * parser mid-reply, so it is rethrown on its own tick instead, as an unhandled error.
 */
function tell<Reply>(answered: Answered<Reply>, tag: number, error: Error | undefined, reply?: Reply): void {
  try {
    answered(error, reply, tag);
  } catch (thrown) {
    process.nextTick(() => {
      throw thrown;
    });
  }
}

/**
 * ioredis' states of a connection that cannot carry a command now ('wait', a lazy client not
 * connected yet, connects on its first command).
 */
const DOWN = new Set(['connecting', 'connect', 'reconnecting', 'disconnecting', 'close', 'end']);

/**
 * The backend's connections to one Redis deployment, opened in the background: the command
 * connection (ours, or the user's client) and our subscriber for the grant channel. Knows
 * whether the server can be reached (connection events, and commands that went unanswered),
 * bounds every call by serverTimeoutMs, and turns failures into errors that name the address.
 */
export class RedisConnections {
  readonly client: RedisConnection;
  /** Always ours: a duplicate of the client, in subscriber mode for the grant channel. */
  readonly subscriber: RedisConnection;
  /** False for a user-supplied client, which the backend never closes. */
  readonly ownsClient: boolean;
  readonly address: string;
  readonly serverTimeoutMs: number;
  /**
   * SUBSCRIBEs of the grant channel answered so far, the first and each after a reconnection: an
   * entry sent under another count (or under none) may have missed a grant published between.
   */
  subscriptions = 0;
  /** The last error a connection reported, kept as the cause of "unreachable". */
  private lastError?: Error;
  /** The connections are TLS (rediss://, or a `tls` option): their errors get explainTlsError's wording. */
  private readonly usesTls: boolean;
  /** Our connections that got an answer (ready) since they last connected. */
  private readonly answered = new Set<RedisConnection>();
  /** A command that went unanswered within serverTimeoutMs, until the next answer. */
  private stalled?: Error;
  /** Commands sent and not answered yet, and since when none of them has been answered. */
  private pending = 0;
  private silentSince = 0;
  /** Outstanding commands with no answer for this long: the server is not answering. */
  private readonly silenceMs: number;
  private subscribing = false;
  /** close() ran: the connections are gone, and every lock of this backend was released before. */
  closed = false;
  /** Callers waiting for the grant channel's subscription. */
  private readonly subscribedWaits: ReadyWaits<void>;
  /**
   * Our own client's commands: ioredis' Command class, the one that writes our encoding (none
   * with a keyPrefix, which ioredis applies as it encodes), their options, and their bound.
   */
  private readonly ownCommands?: {
    readonly Command: OwnCommandClass;
    readonly Encoded?: EncodedCommandClass;
    readonly options: OwnCommandOptions;
    readonly timeouts: CommandTimeouts;
  };
  private readonly startupWarning: NodeJS.Timeout;

  constructor(
    options: RedisBackendOptions,
    settings: BackendSettings,
    private readonly channel: string,
    /** The subscriber came back after a disconnection: grants published meanwhile are lost. */
    private readonly onResubscribed: () => void,
  ) {
    this.address = redisAddress(options);
    this.serverTimeoutMs = settings.serverTimeoutMs;
    this.silenceMs = Math.min(settings.serverTimeoutMs / 4, 250);
    this.ownsClient = options.client === undefined;
    this.usesTls = usesTls(options);
    this.subscribedWaits = new ReadyWaits('redis', this.address, () => this.unreachable());
    if (options.client) {
      this.client = options.client as RedisConnection;
    } else {
      const { Redis, Command } = loadPeer<typeof import('ioredis')>('ioredis', 'redis');
      const userOptions = options.options as import('ioredis').RedisOptions | undefined;
      const keyPrefix = userOptions?.keyPrefix as string | undefined;
      this.ownCommands = {
        Command: Command as unknown as OwnCommandClass,
        Encoded: keyPrefix ? undefined : encodedCommandClass(Command as unknown as OwnCommandClass),
        options: { replyEncoding: 'utf8', keyPrefix },
        timeouts: new CommandTimeouts(settings.serverTimeoutMs),
      };
      // Not with Sentinel, whose connector ioredis picks itself (a Connector option would replace it).
      const connector = userOptions?.sentinels ? undefined : guardedConnector();
      const clientOptions = { ...failFast(settings.serverTimeoutMs), ...(connector ? { Connector: connector } : {}), ...userOptions } as import('ioredis').RedisOptions;
      this.client = (options.url ? new Redis(options.url, clientOptions) : new Redis(clientOptions)) as unknown as RedisConnection;
      this.watchErrors(this.client);
      this.client.on('ready', this.forgetError);
    }
    // Our client's commands are bounded by runScript and ping, its SUBSCRIBE by ioredis as before.
    // Subscribed again by us after a reconnection, not by ioredis, whose SUBSCRIBE then has no
    // handler: a connection closed again at that moment (a failover) rejected it unhandled.
    const subscriberOptions = { autoResubscribe: false, ...(this.ownCommands ? { commandTimeout: settings.serverTimeoutMs } : {}) };
    this.subscriber = this.client.duplicate(subscriberOptions) as RedisConnection;
    // Our own connection: its errors are kept for unreachable(), never left unhandled.
    this.watchErrors(this.subscriber);
    this.subscriber.on('ready', () => {
      this.forgetError();
      if (this.subscribed) this.resubscribe();
      else this.subscribe();
    });
    this.subscribe();
    this.startupWarning = setTimeout(() => {
      if (this.subscribed || this.closed) return;
      const why = this.unreachable() ?? this.lastError;
      logger.warn(
        `The redis server at ${this.address} could not be reached within ${this.serverTimeoutMs} ms of startup` +
          `${why ? ` (${why.message})` : ''}; lock calls fail with LockServerUnreachableError until it can be. Connecting goes on in the background.`,
      );
    }, settings.serverTimeoutMs);
    this.startupWarning.unref();
  }

  /** True once the grant channel was subscribed; before then an acquisition could miss its grant. */
  get subscribed(): boolean {
    return this.subscriptions > 0;
  }

  /**
   * Why the server cannot be reached right now, or undefined. From the connections' states and
   * the last command that went unanswered: no round trip, so it is cheap to ask.
   */
  unreachable(): Error | undefined {
    for (const connection of [this.client, this.subscriber]) {
      const status = connection.status;
      if (status !== undefined && DOWN.has(status)) {
        return this.lastError ?? new Error(status === 'connect' ? 'connected, but the server has not answered' : `not connected (${status})`);
      }
    }
    if (this.stalled) return this.stalled;
    const silentMs = performance.now() - this.silentSince;
    // A paused server leaves its connections up: what gives it away is requests with no answer.
    if (this.pending > 0 && silentMs > this.silenceMs) return new Error(`no answer from the server for ${Math.round(silentMs)} ms`);
    return undefined;
  }

  /**
   * The server refused our connection (or its host was not found) and `connection`, the one a
   * call would go on, has not come back since: the call fails at once with this as its cause,
   * rather than waiting serverTimeoutMs for a server known not to take connections. Only that
   * connection counts: the other one may reconnect later (a supplied client keeps its own pace),
   * and a call refused while its own connection works would fail for nothing.
   */
  refused(connection: RedisConnection = this.client): Error | undefined {
    const error = this.lastError;
    if (!error || !REFUSALS.test((error as NodeJS.ErrnoException).code ?? error.message)) return undefined;
    return connection.status === 'ready' ? undefined : error;
  }

  /**
   * A call that cannot be sent now (the server refuses connections, see refused()): its failure,
   * told on the next turn of the event loop, so that a caller retrying in a loop still lets the
   * reconnection that ends the refusal run.
   */
  private refusedCall(operation: string, connection: RedisConnection = this.client): Promise<never> | undefined {
    const refused = this.refused(connection);
    if (!refused) return undefined;
    const error = new LockServerUnreachableError('redis', operation, this.address, 0, refused);
    return new Promise<never>((_, reject) => setImmediate(() => reject(error)));
  }

  /**
   * `script` on the command connection, as send() bounds and reports it. On our own connection
   * its commands go out as ioredis Commands of ours, encoded by us: bounded by CommandTimeouts
   * (no Node timer per command), and with NOSCRIPT handled in the same reply handler (no promise
   * layer of its own).
   */
  runScript<Reply>(script: RedisScript<Reply>, keys: readonly string[], args: readonly (string | number)[], verb: string, key?: string): Promise<Reply> {
    return this.runCall(script.call(keys, args), verb, key);
  }

  /** As runScript, for a call made once for several connections (see ScriptCall). */
  runCall<Reply>(call: ScriptCall<Reply>, verb: string, key?: string): Promise<Reply> {
    const operation = key === undefined ? verb : `${verb} "${key}"`;
    const refused = this.lastError && this.refusedCall(operation);
    if (refused) return refused;
    if (!this.ownCommands) return this.send(call.script.run(this.client, call.keys, call.args), verb, key);
    return call.script.runWith(this.client, call, (sent, whole, fallBack, onSuccess) => this.sendOwn(sent, whole, fallBack, operation, onSuccess)) as Promise<Reply>;
  }

  /**
   * As runCall, with the answer handed to `answered` instead of a promise: a round to every
   * Redlock master then makes no promise layer per master.
   */
  runCallTo<Reply>(call: ScriptCall<Reply>, verb: string, key: string, answered: Answered<Reply>, tag = 0): void {
    const refused = this.lastError && this.refusedCall(`${verb} "${key}"`);
    if (refused) return void refused.catch((error: Error) => answered(error, undefined, tag));
    if (!this.ownCommands) {
      this.send(call.script.run(this.client, call.keys, call.args), verb, key).then(
        (reply) => answered(undefined, reply, tag),
        (error: Error) => answered(error, undefined, tag),
      );
      return;
    }
    const operation = `${verb} "${key}"`;
    call.script.runWith(this.client, call, (sent, whole, fallBack, onSuccess) => void this.sendOwn(sent, whole, fallBack, operation, onSuccess, answered as Answered<unknown>, tag));
  }

  /** PING on the command connection, bounded like every command. */
  ping(): Promise<unknown> {
    const refused = this.refusedCall('answer a PING');
    if (refused) return refused;
    if (!this.ownCommands) return this.send(this.client.ping(), 'answer a PING');
    const { Command, options, timeouts } = this.ownCommands;
    const command = new Command('ping', [], options);
    return this.sendCommand(command, 'answer a PING', timeouts);
  }

  /**
   * One script call of ours, as `EVAL` (`whole`) or `EVALSHA`: tracked as send() tracks, failing
   * as send() fails, and returning the command's own promise (see answeredBy). `fallBack`: a
   * NOSCRIPT is answered by the whole script; `onSuccess` is told first; `answered`, when given,
   * gets the answer instead of the promise's callers.
   */
  private sendOwn(call: ScriptCall<unknown>, whole: boolean, fallBack: boolean, operation: string, onSuccess?: () => void, answered?: Answered<unknown>, tag = 0): Promise<unknown> {
    const { Command, Encoded, options, timeouts } = this.ownCommands!;
    const name = whole ? 'eval' : 'evalsha';
    const command = Encoded ? new Encoded(name, call.words(whole), options, call.encoded(whole)) : new Command(name, call.words(whole), options);
    return this.sendCommand(command, operation, timeouts, fallBack ? call : undefined, onSuccess, answered, tag);
  }

  /** `command` on our connection, answered as answeredBy says; `fallBack`: the call to send whole on a NOSCRIPT. */
  private sendCommand(command: OwnCommand, operation: string, timeouts: CommandTimeouts, fallBack?: ScriptCall<unknown>, onSuccess?: () => void, answered?: Answered<unknown>, tag = 0): Promise<unknown> {
    const sentAt = performance.now();
    if (this.pending++ === 0) this.silentSince = sentAt;
    // Before sending: ioredis may fail a command inside sendCommand (a closed connection).
    this.answeredBy(command, operation, sentAt, fallBack, onSuccess, answered, tag);
    this.client.sendCommand(command);
    timeouts.track(command, sentAt);
    return command.promise;
  }

  /**
   * Counts the command's first answer for unreachable() and words its failure as failure()
   * does, in the command's own resolve and reject (public members of ioredis' Command, which
   * ioredis calls by name): no promise layer of ours between the reply and whoever waits. A
   * NOSCRIPT to an EVALSHA of `fallBack` is answered by that call sent whole. Anything after the first answer
   * (CommandTimeouts failing a command ioredis already failed, a reply after the timeout)
   * changes nothing. With `answered`, the answer goes there; the command's promise still
   * settles, for ioredis' tracing, and a failure on it is not left unhandled.
   */
  private answeredBy(command: OwnCommand, operation: string, sentAt: number, fallBack?: ScriptCall<unknown>, onSuccess?: () => void, answered?: Answered<unknown>, tag = 0): void {
    const { resolve, reject } = command;
    let done = false;
    command.resolve = (value: unknown) => {
      if (done) return;
      done = true;
      this.onAnswer();
      onSuccess?.();
      if (!answered) return resolve(value);
      const reply = command.transformReply(value);
      resolve(reply);
      tell(answered, tag, undefined, reply);
    };
    command.reject = (error: Error) => {
      if (done) return;
      done = true;
      this.pending--;
      if (answered) command.promise.catch(ignore);
      if (fallBack && isNoScript(error)) {
        // The whole script answers in this command's place: through `answered`, or this promise.
        const retried = this.sendOwn(fallBack, true, false, operation, undefined, answered, tag);
        if (answered) reject(error);
        else retried.then(resolve, reject);
        return;
      }
      const failure = this.failure(operation, error, sentAt);
      reject(failure);
      if (answered) tell(answered, tag, failure);
    };
  }

  /**
   * `command` (a promise of the command connection), tracked for unreachable() and bounded by
   * serverTimeoutMs: a supplied client's options are the user's, so its commands race a timer
   * (our own connection's go through runScript and ping instead). A failure rejects with
   * failure()'s error, for `${verb} "${key}"` (`verb` alone without a key).
   */
  send<T>(command: Promise<T>, verb: string, key?: string): Promise<T> {
    const sentAt = performance.now();
    if (this.pending++ === 0) this.silentSince = sentAt;
    const failed = (error: unknown): never => {
      this.pending--;
      throw this.failure(key === undefined ? verb : `${verb} "${key}"`, error, sentAt);
    };
    return new Promise<T>((resolve, reject) => {
      let settled = false;
      const timer = setTimeout(() => {
        settled = true;
        reject(new Error('Command timed out'));
      }, this.serverTimeoutMs);
      command.then(
        (value) => {
          if (settled) return; // counted as failed at the timeout
          clearTimeout(timer);
          this.onAnswer();
          resolve(value);
        },
        (error) => {
          if (settled) return;
          clearTimeout(timer);
          settled = true;
          reject(error);
        },
      );
    }).catch(failed);
  }

  /**
   * The error a caller sees for a failed command started at `startedAt`: LockServerUnreachableError
   * when the server could not be reached or did not answer in time, else LockBackendError; both
   * name the address and keep the client's error as `cause`.
   */
  failure(operation: string, error: unknown, startedAt: number): LockBackendError {
    if (error instanceof LockBackendError) return error;
    const message = (error as Error)?.message ?? '';
    if (message === 'Command timed out') this.stalled = error as Error;
    // A reply before the connection is ready is its handshake's refusal (WRONGPASS): ioredis fails
    // the commands queued meanwhile with it, maybe before the connection's own error event.
    const handshake = this.client.status !== 'ready' && (error as Error)?.name === 'ReplyError' ? (error as Error) : undefined;
    // The connection's own error (ECONNREFUSED) says more than ioredis' "max retries" wording.
    const down = handshake ?? this.unreachable() ?? (isConnectionError(message) ? (this.lastError ?? (error as Error)) : undefined);
    if (down) return new LockServerUnreachableError('redis', operation, this.address, Math.round(performance.now() - startedAt), down);
    return new LockBackendError('redis', operation, error, this.address);
  }

  /**
   * Resolves once the grant channel is subscribed; rejects with `signal`'s reason when it aborts
   * first, and with LockServerUnreachableError after serverTimeoutMs.
   */
  whenSubscribed(operation: string, signal?: AbortSignal): Promise<void> {
    if (this.subscribed) return Promise.resolve();
    const refused = this.refusedCall(operation, this.subscriber);
    if (refused) return refused;
    return this.subscribedWaits.wait(operation, this.serverTimeoutMs, signal);
  }

  close(): void {
    this.closed = true;
    clearTimeout(this.startupWarning);
    this.subscribedWaits.fail(this.closedError);
    this.ownCommands?.timeouts.clear();
    this.subscriber.disconnect();
    if (this.ownsClient) this.client.disconnect();
  }

  /**
   * SUBSCRIBE, once at a time; one that failed (the server was down) is sent again on the
   * subscriber's next 'ready'. Once subscribed, resubscribe() subscribes again after each reconnection.
   */
  private subscribe(): void {
    if (this.subscribing || this.subscribed || this.closed) return;
    this.subscribing = true;
    this.subscriber.subscribe(this.channel).then(
      () => {
        this.subscribing = false;
        this.subscriptions++;
        this.stalled = undefined;
        // A SUBSCRIBE answered after close() does not let a caller that came since go on.
        if (this.closed) this.subscribedWaits.fail(this.closedError);
        else this.subscribedWaits.ready();
      },
      (error: Error) => {
        this.subscribing = false;
        this.lastError ??= error;
      },
    );
  }

  /**
   * The subscriber came back: SUBSCRIBE again, and once the server has it, tell the backend
   * (grants published before then are lost). Failing, the next 'ready' does it again.
   */
  private resubscribe(): void {
    this.subscriber.subscribe(this.channel).then(
      () => {
        this.subscriptions++;
        if (!this.closed) this.onResubscribed();
      },
      () => undefined,
    );
  }

  /** What a caller still waiting for the subscription gets at close. */
  private readonly closedError = (operation: string): Error => new LockBackendError('redis', operation, new Error('the backend was closed'), this.address);

  /** A command was answered: the server is there. */
  private onAnswer(): void {
    this.pending--;
    this.silentSince = performance.now();
    this.stalled = undefined;
  }

  /** Keeps a connection's errors for unreachable(), a TLS failure in words that name the option to change. */
  private watchErrors(connection: RedisConnection): void {
    connection.on('ready', () => this.answered.add(connection));
    connection.on('close', () => this.answered.delete(connection));
    connection.on('error', (error: Error) => {
      this.lastError = this.usesTls ? moreTellingTlsError(this.lastError, explainTlsError(error, TLS_OPTIONS, !this.answered.has(connection))) : error;
    });
  }

  /** A connection became ready: the server answered its handshake. */
  private readonly forgetError = (): void => {
    this.lastError = undefined;
    this.stalled = undefined;
  };
}

/** Errors that say the server does not take connections now (as opposed to one that is slow). */
const REFUSALS = /ECONNREFUSED|ENOTFOUND|EHOSTUNREACH|ENETUNREACH|EAI_AGAIN/;

/** The longest pause between reconnection attempts, before jitter. */
const RECONNECT_CAP_MS = 1_000;
/** Random extra pause per attempt, so a fleet of clients does not reconnect in step. */
const RECONNECT_JITTER_MS = 100;

/**
 * Pauses between reconnection attempts: 50 ms, doubling, up to a second. ioredis 6's own default
 * grows to 5 s, which left a restarted server unused by the locks for up to 5 s; a lock library
 * wants it back within a second, whatever the ioredis version.
 */
export function reconnectDelayMs(attempt: number): number {
  return Math.min(50 * 2 ** Math.min(attempt - 1, 10), RECONNECT_CAP_MS) + Math.floor(Math.random() * RECONNECT_JITTER_MS);
}

/**
 * What our own connections are given unless `options` says otherwise: connecting takes at most
 * serverTimeoutMs (each command too, by CommandTimeouts), a command is never sent again after a reconnection
 * (`maxRetriesPerRequest: 0`: a script whose caller was already told it failed must not run
 * later), and reconnection attempts come at most about a second apart. Commands made while
 * reconnecting still wait in ioredis' offline queue, bounded by CommandTimeouts, so a short blip
 * is ridden out.
 */
function failFast(serverTimeoutMs: number): Record<string, unknown> {
  return { connectTimeout: serverTimeoutMs, maxRetriesPerRequest: 0, retryStrategy: reconnectDelayMs };
}

const TLS_OPTIONS = { trust: 'backend.options.tls.ca', clientCertificate: 'backend.options.tls.cert and backend.options.tls.key' };

/** rediss://, or ioredis' `tls` option (ours, or the supplied client's). */
function usesTls(options: RedisBackendOptions): boolean {
  const clientOptions = (options.client as { options?: { tls?: unknown } } | undefined)?.options ?? options.options;
  return /^rediss:/i.test(options.url ?? '') || Boolean(clientOptions?.tls);
}

/** ioredis' wordings for a command lost with its connection. */
function isConnectionError(message: string): boolean {
  return /max retries per request|Connection is closed|Stream isn't writeable|connection close|ECONNREFUSED|ECONNRESET|ETIMEDOUT|EPIPE|EHOSTUNREACH/i.test(message);
}
