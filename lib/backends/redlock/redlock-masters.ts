import { deadlines } from '../../deadlines';
import { LockBackendError, LockServerUnreachableError } from '../../errors';
import type { BackendSettings } from '../backend-definition';
import { redisAddress } from '../redis/redis-address';
import { RedisConnections } from '../redis/redis-connection';
import type { RedisBackendOptions } from '../redis/redis-options';
import type { RedisScript, ScriptCall } from '../redis/redis-script';
import { ServerLife } from '../redis/server-life';
import { lifeReply } from '../redis/server-life-scripts';
import type { RedlockBackendOptions } from './redlock-options';
import { quorum } from './redlock-options';
import { acquireScript, redlockKeys } from './redlock-scripts';

/** One master's answer to one request: its reply, its error, or undefined when it did not answer in time. */
export type Answer<T> = { readonly ok: true; readonly value: T } | { readonly ok: false; readonly error: Error } | undefined;

const KEY_CACHE_SIZE = 10_000;

/**
 * The N independent masters: a connection and a subscriber each (RedisConnections, opened in the
 * background), and requests sent to all of them in parallel, each round bounded by the
 * per-master request timeout with one deadline for the whole round.
 */
export class RedlockMasters {
  readonly connections: RedisConnections[];
  /** Each master as errors show it: `host:port`, never a password. */
  readonly addresses: string[];
  readonly quorum: number;
  /** Per master: finds a restart that lost its data, and keeps it from voting until old leases ended. */
  private readonly lives: ServerLife[];
  private readonly keyCache = new Map<string, string[]>();
  private wasReady = false;

  constructor(
    options: RedlockBackendOptions,
    settings: BackendSettings,
    /** How long one master may take to answer one request (RedlockBackendOptions.requestTimeoutMs). */
    readonly requestTimeoutMs: number,
    /** What a release or a renewal may wait for: they have no vote to win against the clock. */
    readonly serverTimeoutMs: number,
    channel: string,
    /** A master said a lock is free (the message names the lock key). */
    onWord: (master: number, key: string) => void,
    /** A subscriber came back after a disconnection: words published meanwhile are lost. */
    onResubscribed: () => void,
  ) {
    const perMaster: RedisBackendOptions[] = options.clients
      ? options.clients.map((client) => ({ type: 'redis' as const, client }))
      : // ioredis' own resubscription after a reconnect leaves a promise nobody handles when the
        // connection is closed at that moment: our subscribers resubscribe themselves (below).
        options.urls!.map((url) => ({ type: 'redis' as const, url, options: { autoResubscribe: false, ...options.options } }));
    const ownSubscribers = !options.clients;
    this.connections = perMaster.map((master, index) => {
      const connections: RedisConnections = new RedisConnections(master, settings, channel, () => {
        this.lives[index].reconnected();
        if (!ownSubscribers) return onResubscribed();
        connections.subscriber.subscribe(channel).then(onResubscribed, () => undefined);
      });
      connections.subscriber.on('message', (_channel: string, key: string) => onWord(index, key));
      return connections;
    });
    this.lives = this.connections.map((connections) => new ServerLife(connections, settings.ttlMs, options.restartProtection !== false, 'redlock'));
    this.addresses = perMaster.map((master) => redisAddress(master));
    this.quorum = quorum(this.connections.length);
  }

  get count(): number {
    return this.connections.length;
  }

  /** As roundTo, resolving with the answers. */
  round<T>(
    script: RedisScript<T>,
    key: string,
    args: readonly (string | number)[],
    verb: string,
    decided?: (answers: readonly Answer<T>[]) => boolean,
    only?: readonly boolean[],
    timeoutMs = this.requestTimeoutMs,
  ): Promise<Answer<T>[]> {
    return new Promise((resolve) => this.roundTo(script, key, args, verb, resolve, decided, only, timeoutMs));
  }

  /**
   * Sends `script` for `key` to every master (or those `only` selects) at once, and hands their
   * answers by index to `done` once all answered, once `decided` says the rest cannot change the
   * outcome, or after `timeoutMs` (default: the per-master request timeout), whichever is first.
   * Answers that come after that are still written into the array (a won vote looks at them when
   * it releases: did every master keep in step?). A callback, not a promise: a lock cycle's
   * rounds are on its path, and each promise layer costs it.
   */
  roundTo<T>(
    script: RedisScript<T>,
    key: string,
    args: readonly (string | number)[],
    verb: string,
    done: (answers: Answer<T>[]) => void,
    decided?: (answers: readonly Answer<T>[]) => boolean,
    only?: readonly boolean[],
    timeoutMs = this.requestTimeoutMs,
  ): void {
    // Its words and their encoding are made once, for every master.
    const call = script.call(this.keysOf(key), args);
    const answers: Answer<T>[] = new Array(this.connections.length).fill(undefined);
    let pending = 0;
    let finished = false;
    const finish = () => {
      if (finished) return;
      finished = true;
      deadlines.cancel(timer);
      done(answers);
    };
    // Every command is bounded by serverTimeoutMs already (RedisConnections): a round as long needs no deadline of its own.
    const timer = timeoutMs < this.serverTimeoutMs ? deadlines.add(performance.now() + timeoutMs, finish) : undefined;
    const settle = (error: Error | undefined, value: T | undefined, index: number) => {
      answers[index] = error ? { ok: false, error } : { ok: true, value: value as T };
      if (!finished && (--pending === 0 || decided?.(answers))) finish();
    };
    const { connections } = this;
    const voting = (script as RedisScript<unknown>) === acquireScript;
    const answered = voting ? this.lifeAware(call, verb, key, settle) : settle;
    for (let index = 0; index < connections.length; index++) {
      if (only && !only[index]) continue;
      pending++;
      if (voting) this.lives[index].asked(Number(args[1]));
      connections[index].runCallTo(call, verb, key, answered, index);
    }
    if (pending === 0) finish();
  }

  /**
   * Resolves at once when a majority of masters is connected (and subscribed for words); else
   * once that many are, or all have answered or given up (each within serverTimeoutMs): a first
   * vote must not spend its request timeout on connecting.
   */
  ready(): Promise<void> | undefined {
    if (this.wasReady) return undefined;
    let connected = this.connections.filter((connections) => connections.subscribed).length;
    // Once a majority was up, votes count missing masters as not granting: ready for good.
    if (connected >= this.quorum) return void (this.wasReady = true);
    return new Promise((resolve) => {
      let waiting = this.connections.length - connected;
      for (const connections of this.connections) {
        if (connections.subscribed) continue;
        const settle = (ok: boolean) => {
          if (ok) connected++;
          if (--waiting === 0 || connected >= this.quorum) resolve();
        };
        connections.whenSubscribed('connect').then(
          () => settle(true),
          () => settle(false),
        );
      }
    });
  }

  /**
   * PING on every master's command connection at once (each bounded as every request is):
   * resolves once a majority answered, rejects as soon as too many failed for one to.
   */
  ping(): Promise<void> {
    const startedAt = performance.now();
    return new Promise((resolve, reject) => {
      let answered = 0;
      const failed: string[] = [];
      let firstError: Error | undefined;
      this.connections.forEach((connections, index) => {
        connections.ping().then(
          () => {
            if (++answered === this.quorum) resolve();
          },
          (error: Error) => {
            failed.push(this.addresses[index]);
            firstError ??= error instanceof LockBackendError && error.cause instanceof Error ? error.cause : error;
            if (failed.length === this.count - this.quorum + 1) {
              reject(new LockServerUnreachableError('redlock', `answer a PING on a majority (${this.quorum} of ${this.count})`, failed.join(', '), Math.round(performance.now() - startedAt), firstError));
            }
          },
        );
      });
    });
  }

  /** The masters that gave no reply in `answers` (an error or no answer in time), as errors name them. */
  unanswered(answers: readonly Answer<unknown>[], only?: readonly boolean[]): string {
    return this.addresses.filter((_, index) => (!only || only[index]) && !answers[index]?.ok).join(', ');
  }

  /** The first error among `answers`: why a master did not answer, as a cause. */
  firstError(answers: readonly Answer<unknown>[]): Error | undefined {
    for (const [index, answer] of answers.entries()) {
      // The connection's own error (ECONNREFUSED), not its wrapping that names one master as 'the redis server'.
      if (answer && !answer.ok) return answer.error instanceof LockBackendError && answer.error.cause instanceof Error ? answer.error.cause : answer.error;
      if (!answer) return this.connections[index].unreachable();
    }
    return undefined;
  }

  /**
   * Why a majority cannot be reached right now, or undefined: from the connections' own states
   * and their last unanswered requests, with no round trip.
   */
  unreachable(): Error | undefined {
    const down: string[] = [];
    for (const [index, connections] of this.connections.entries()) {
      const why = connections.unreachable();
      if (why) down.push(`${this.addresses[index]} (${why.message})`);
    }
    if (down.length <= this.count - this.quorum) return undefined;
    return new Error(`${down.length} of ${this.count} masters cannot be reached, and a lock needs ${this.quorum}: ${down.join(', ')}`);
  }

  close(): void {
    for (const connections of this.connections) connections.close();
  }

  /**
   * A vote's answers, past its master's life check: a master with no marker (a first boot, or
   * data lost) has it dealt with (ServerLife.after), then counts as unanswered in this vote (the
   * next one, 50 ms later, finds the marker), or as refusing for the quarantine it is under. It is
   * not asked again within the vote: the vote may be decided meanwhile, and a grant arriving after
   * its give-back would hold that master for a whole ttl, which with a minority down blocks every
   * majority.
   */
  private lifeAware<T>(call: ScriptCall<T>, verb: string, key: string, settle: (error: Error | undefined, value: T | undefined, index: number) => void) {
    return (error: Error | undefined, value: T | undefined, index: number): void => {
      const life = error ? undefined : lifeReply(value);
      if (!error && !life) this.lives[index].answered();
      if (life?.[0] !== -2) return settle(error, value, index);
      this.lives[index].after(life).then(
        (waitMs) => (waitMs > 0 ? settle(undefined, [-3, 0, waitMs] as T, index) : settle(new FirstLifeBegun(this.addresses[index]), undefined, index)),
        (failure: Error) => settle(failure, undefined, index),
      );
    };
  }

  private keysOf(key: string): string[] {
    let keys = this.keyCache.get(key);
    if (!keys) {
      // Names built from unbounded values (order ids) would grow the cache forever: start over.
      if (this.keyCache.size >= KEY_CACHE_SIZE) this.keyCache.clear();
      this.keyCache.set(key, (keys = redlockKeys(key)));
    }
    return keys;
  }
}

/** A master's answer in a vote that found it without a life marker, now written: the next vote asks it. */
class FirstLifeBegun extends Error {
  constructor(address: string) {
    super(`${address} had no life marker yet (its first lock since it started empty); it has one now`);
  }
}
