import { Logger } from '@nestjs/common';
import { randomBytes } from 'node:crypto';
import { DistributedLockError } from '../../errors';
import type { BackendSettings } from '../backend-definition';
import type { AcquireRequest, LockBackend, LockGrant } from '../lock-backend.interface';
import { LocalSuccessors } from './local-successors';
import { RedisWaiter, type WaiterEvents } from './redis-waiter';
import { openConnections, type RedisConnections } from './redis-connection';
import { lockKeys, type LockKeys } from './redis-keys';
import {
  acquireBatchScript,
  acquireScript,
  cancelScript,
  checkScript,
  GRANT_CHANNEL_PREFIX,
  releaseScript,
  renewScript,
  transferScript,
} from './redis-lock-scripts';
import { validateRedisOptions, type RedisBackendOptions } from './redis-options';

/** How long after a lease ends a waiter's safety check runs: timer lateness, not a poll. */
const EXPIRY_CHECK_MARGIN_MS = 25;

/** The safety check's period for a key: a third of the shortest waiting ttl, within [50 ms, 10 s]. */
const checkIntervalMs = (ttlMs: number) => Math.min(Math.max(ttlMs / 3, 50), 10_000);
/** A process whose checks stopped this long ago is dead to the queue: its waiters are skipped. */
const staleAfterMs = (intervalMs: number) => Math.round(intervalMs * 3 + 1_000);

const KEY_CACHE_SIZE = 10_000;
/**
 * A holder hands the lock to a waiter of its own process only when its lease is known valid at
 * least this much longer: the waiter runs under that lease until Redis has recorded the
 * hand-over (one round trip later), so a lease about to end is better handed on by Redis.
 */
const MIN_HANDOVER_VALIDITY_MS = 50;
/** Callers per batched acquire script and per transfer script: Lua's unpack() has a stack limit. */
const MAX_PER_SCRIPT = 500;

const logger = new Logger('DistributedLock');

/**
 * A run of hand-overs inside this process on one key that Redis has not heard of yet: the lock
 * went from `from` (the owner Redis still has) to each of `to` in turn. Told to Redis in one
 * transfer script once the process is idle (process.nextTick runs after every pending promise
 * reaction), so a burst of this process's callers costs one command, not one per caller.
 */
interface HandOverRun {
  readonly from: LockGrant;
  readonly to: { owner: string; fence: string }[];
  /** The last of `to` let go with no waiter of ours behind it: release it after the transfer. */
  released: boolean;
  /** Settles once Redis has the run: when it was sent, or undefined when refused. */
  readonly recorded: Promise<number | undefined>;
  record(sentAt: number | undefined): void;
  /** Every release folded into the run waits for this. */
  readonly done: Promise<void>;
  finish(): void;
}

/** This process's waiters on one key, and the timer of their shared safety check. */
interface KeyWatch {
  readonly waiters: Map<string, RedisWaiter>;
  /**
   * The shortest ttl of the waiters that joined since the watch began; it sets how often the key
   * is checked. Kept as waiters leave (a check a little more often than needed is harmless), so
   * a burst of waiters costs O(1) each, not a scan of the others.
   */
  shortestTtlMs: number;
  timer?: NodeJS.Timeout;
  /** performance.now() the timer fires at. */
  checkAt: number;
}

/**
 * Redis (single node, Sentinel or Cluster): a FIFO queue per lock name with direct handoff.
 * The release script makes the next waiter the owner and publishes the grant on that waiter's
 * process channel, so a waiter owns the lock when the message arrives. See docs/redis.md.
 */
export class RedisLockBackend implements LockBackend {
  readonly name = 'redis';
  /** Names are percent-encoded into the hash tag (up to 3x); Redis takes far longer keys. */
  readonly maxKeyBytes = 1024;
  /** 96 random bits, short: it names the grant channel and goes with every queued waiter. */
  private readonly clientId = randomBytes(12).toString('base64url');
  private readonly channel = GRANT_CHANNEL_PREFIX + this.clientId;
  private readonly waiting = new Map<string, RedisWaiter>();
  private readonly watches = new Map<string, KeyWatch>();
  private readonly held = new Map<string, LockGrant>();
  private readonly successors = new LocalSuccessors();
  private readonly waiterEvents: WaiterEvents = {
    settled: (waiter, granted) => {
      if (!this.waiting.delete(waiter.owner)) return false;
      if (granted) this.successors.granted(waiter.owner);
      else this.successors.left(waiter.owner);
      this.unwatch(waiter.key, waiter.owner);
      return true;
    },
    abandoned: (waiter) => void this.cancelAtServer(waiter.key, waiter.owner),
  };
  /** Per key, the hand-overs inside this process that Redis has not been told of yet. */
  private readonly runs = new Map<string, HandOverRun>();
  /**
   * Per key, the acquisitions of this tick after the first (which went out at once): sent
   * together at the end of the tick, in one script (see sendBatch).
   */
  private readonly batches = new Map<string, RedisWaiter[]>();
  /** Key names per lock key, built once: apps lock a bounded set of names, and a cycle needs them twice. */
  private readonly keyCache = new Map<string, LockKeys>();
  /**
   * Redis cannot tell us a lease is gone without being asked (renewal asks), so the only loss the
   * backend reports itself is its own closing: one signal shared by every grant, fired by close().
   */
  private readonly closing = new AbortController();
  private connections!: RedisConnections;
  private closed = false;

  /** Validates, connects and subscribes; use createRedisBackend(). */
  static async open(options: RedisBackendOptions): Promise<RedisLockBackend> {
    validateRedisOptions(options);
    const backend = new RedisLockBackend();
    backend.connections = await openConnections(options, backend.channel);
    backend.listen();
    return backend;
  }

  private constructor() {}

  acquire(request: AcquireRequest): Promise<LockGrant> {
    if (this.closed) return Promise.reject(new DistributedLockError('The redis lock backend is closed.'));
    const { key, owner } = request;
    return new Promise<LockGrant>((resolve, reject) => {
      const waiter = new RedisWaiter(key, owner, Math.ceil(request.ttlMs), request, this.waiterEvents, resolve, reject);
      // Registered before this tick ends, so before any grant message (which can overtake the
      // script's reply) can be read.
      this.waiting.set(owner, waiter);
      const batch = this.batches.get(key);
      if (batch && batch.length < MAX_PER_SCRIPT) return void batch.push(waiter);
      if (batch) this.sendBatch(key);
      // The first acquisition of a key in a tick goes out at once; later ones wait for the batch.
      this.batches.set(key, []);
      process.nextTick(() => this.sendBatch(key));
      this.sendAcquire(waiter);
    });
  }

  /** One acquisition alone: the acquire script. */
  private sendAcquire(waiter: RedisWaiter): void {
    const sentAt = performance.now();
    this.runAcquire(waiter.key, waiter.owner, waiter.ttlMs, true).then(
      (reply) => this.onQueued(waiter, reply, sentAt),
      (error) => waiter.settle(undefined, error),
    );
  }

  /** The acquisitions of one key that followed the first in a tick, in one round trip. */
  private sendBatch(key: string): void {
    const batch = this.batches.get(key);
    if (!batch) return; // sent early, when it was full
    this.batches.delete(key);
    const waiters = batch.filter((waiter) => this.waiting.get(waiter.owner) === waiter);
    if (waiters.length === 0) return;
    if (waiters.length === 1) return this.sendAcquire(waiters[0]);
    const sentAt = performance.now();
    const args: (string | number)[] = [this.clientId, this.staleAfter(key, this.shortestTtl(waiters)), key];
    for (const waiter of waiters) args.push(waiter.owner, waiter.ttlMs);
    acquireBatchScript.run(this.connections.client, this.keysOf(key).all, args).then(
      (replies) => waiters.forEach((waiter, i) => this.onQueued(waiter, replies[i], sentAt)),
      (error) => waiters.forEach((waiter) => waiter.settle(undefined, error)),
    );
  }

  /** The acquire script's answer for `waiter`: granted, or queued behind someone. */
  private onQueued(waiter: RedisWaiter, reply: [1, string] | [0, number] | [0, number, string, string], sentAt: number): void {
    const { key, owner } = waiter;
    if (reply[0] === 1) return this.deliver(key, owner, reply[1], sentAt);
    if (this.waiting.get(owner) !== waiter) return; // granted (the message came first) or gave up
    const [, ownerPttlMs, fence, ahead] = reply as [0, number, string, string];
    waiter.fence = fence;
    if (!waiter.listenForAbort()) return;
    if (this.waiting.has(ahead) || this.held.has(ahead)) this.successors.link(ahead, owner);
    this.watch(waiter);
    this.scheduleCheck(key, ownerPttlMs);
  }

  async tryAcquire({ key, owner, ttlMs }: Omit<AcquireRequest, 'signal'>): Promise<LockGrant | null> {
    this.assertOpen();
    const sentAt = performance.now();
    const reply = await this.runAcquire(key, owner, Math.ceil(ttlMs), false);
    return reply[0] === 1 ? this.grantOf(key, owner, reply[1], sentAt) : null;
  }

  async renew(grant: LockGrant, ttlMs: number): Promise<boolean> {
    if (this.closed) return false;
    this.tellHandOvers(grant.key);
    const renewed = await renewScript.run(this.connections.client, [this.keysOf(grant.key).owner], [ownerValue(grant.fencingToken, grant.owner), Math.ceil(ttlMs)]);
    return renewed === 1;
  }

  /**
   * When the waiter right behind this holder in the queue is ours, it holds the lock from now
   * (see handOver); otherwise the release script hands the lock on through Redis.
   */
  release(grant: LockGrant, validForMs?: number): Promise<void> {
    this.held.delete(grant.owner);
    const successor = this.successors.takeSuccessor(grant.owner);
    // None after close(): it settled every waiter, and acquire() refuses new ones.
    const next = successor === undefined ? undefined : this.waiting.get(successor);
    const handOver = next?.fence !== undefined && validForMs !== undefined && validForMs >= MIN_HANDOVER_VALIDITY_MS;
    const run = this.runs.get(grant.key);
    if (run && !run.released && run.to[run.to.length - 1].owner === grant.owner && run.to.length < MAX_PER_SCRIPT) {
      // The lock came to this holder in a run Redis has not heard of yet: carry the run on, or end it.
      if (handOver) this.handOver(run, next!, validForMs!);
      else run.released = true;
      return run.done;
    }
    this.tellHandOvers(grant.key);
    if (handOver) {
      const started = this.startRun(grant);
      this.handOver(started, next!, validForMs!);
      return started.done;
    }
    return this.releaseAtServer(grant.key, ownerValue(grant.fencingToken, grant.owner));
  }

  async close(): Promise<void> {
    if (this.closed) return;
    this.closed = true;
    const waitError = new DistributedLockError('The redis lock backend was closed while waiting.');
    const pending: Promise<unknown>[] = [];
    for (const waiter of [...this.waiting.values()]) {
      waiter.settle(undefined, waitError);
      pending.push(this.cancelAtServer(waiter.key, waiter.owner));
    }
    for (const key of [...this.runs.keys()]) this.tellHandOvers(key);
    this.closing.abort(new DistributedLockError('The redis lock backend was closed while the lock was held.'));
    this.successors.clear();
    for (const grant of [...this.held.values()]) pending.push(this.release(grant).catch(() => undefined));
    // Best effort: with the server unreachable the leases and queue entries expire on their own.
    await Promise.race([Promise.all(pending), new Promise((resolve) => setTimeout(resolve, 2_000).unref())]);
    this.connections.subscriber.disconnect();
    if (this.connections.ownsClient) this.connections.client.disconnect();
  }

  /**
   * The waiter right behind the run's current holder in the queue is ours: it holds the lock
   * from now, with the fence it queued with, under the previous holder's lease (`validForMs`)
   * until Redis has recorded the run (LockGrant.provisional). No message, no round trip: a queue
   * of this process's callers moves at the speed of the process, in FIFO order.
   */
  private handOver(run: HandOverRun, to: RedisWaiter, validForMs: number): void {
    run.to.push({ owner: to.owner, fence: to.fence! });
    const provisional = { validUntil: performance.now() + validForMs, recorded: run.recorded };
    to.settle(this.grantOf(run.from.key, to.owner, to.fence!, undefined, provisional));
  }

  private startRun(from: LockGrant): HandOverRun {
    let record!: (sentAt: number | undefined) => void;
    let finish!: () => void;
    const run: HandOverRun = {
      from,
      to: [],
      released: false,
      recorded: new Promise((resolve) => (record = resolve)),
      record,
      done: new Promise((resolve) => (finish = resolve)),
      finish,
    };
    this.runs.set(from.key, run);
    process.nextTick(() => this.tellHandOvers(from.key));
    return run;
  }

  /**
   * Sends the key's pending run, if any: before any other command on the key, so Redis always
   * hears of the hand-overs first. If Redis no longer has things as we believe (the owner's
   * lease vanished in a restart, a waiter was re-queued), nothing changes there, and every
   * holder of the run is told its lock is lost before the old owner is let go.
   */
  private tellHandOvers(key: string): void {
    const run = this.runs.get(key);
    if (!run) return;
    this.runs.delete(key);
    const keys = this.keysOf(key).all;
    const last = run.to[run.to.length - 1];
    const args = [ownerValue(run.from.fencingToken, run.from.owner)];
    for (const { owner, fence } of run.to) args.push(owner, fence);
    const sentAt = performance.now();
    const transferred = transferScript.runInOrder(this.connections.client, keys, args).catch((error: unknown) => error);
    const lastReleased = run.released ? this.releaseAtServer(key, ownerValue(last.fence, last.owner)) : undefined;
    void transferred.then(async (outcome) => {
      if (outcome === 1) {
        run.record(sentAt);
      } else {
        run.record(undefined);
        logger.warn(`Handing "${key}" on inside this process failed (${outcome === 0 ? 'the lease was gone' : outcome === 2 ? 'a waiter was re-queued' : String(outcome)}); its holders were told the lock is lost.`);
        for (const { owner, fence } of run.to) {
          if (this.held.get(owner)?.fencingToken === BigInt(fence)) this.held.delete(owner);
          await this.cancelAtServer(key, owner);
        }
        if (outcome !== 0) await this.releaseAtServer(key, ownerValue(run.from.fencingToken, run.from.owner)).catch(() => undefined);
      }
      await lastReleased?.catch(() => undefined);
      run.finish();
    });
  }

  /**
   * One round trip, owner-checked against `value` ('<fence> <owner>'); the reply (0: not ours)
   * changes nothing for the caller.
   */
  private releaseAtServer(key: string, value: string): Promise<void> {
    const released: Promise<unknown> = releaseScript.run(this.connections.client, this.keysOf(key).all, [value, key]);
    return released as Promise<void>;
  }

  private runAcquire(key: string, owner: string, ttlMs: number, mayQueue: boolean) {
    const args = [owner, ttlMs, this.clientId, this.staleAfter(key, ttlMs), key, mayQueue ? '1' : '0'];
    return acquireScript.run(this.connections.client, this.keysOf(key).all, args);
  }

  private listen(): void {
    const { subscriber } = this.connections;
    subscriber.on('message', (channel: string, message: string) => {
      if (channel !== this.channel) return;
      const [fence, key, owner] = JSON.parse(message) as [string, string, string];
      this.deliver(key, owner, fence);
    });
    // Grants published while the subscriber was reconnecting are lost: check every waiting key now.
    let connectedOnce = false;
    subscriber.on('ready', () => {
      if (connectedOnce) for (const key of this.watches.keys()) this.scheduleCheck(key, -1, 0);
      connectedOnce = true;
    });
  }

  /** A grant for `owner`: to its waiter if it still waits, else (it gave up) handed on at once. */
  private deliver(key: string, owner: string, fence: string, requestedAt?: number): void {
    const waiter = this.waiting.get(owner);
    if (waiter) return waiter.settle(this.grantOf(key, owner, fence, requestedAt));
    if (this.held.has(owner)) return; // the same grant seen twice (message and safety check)
    this.releaseAtServer(key, ownerValue(fence, owner)).catch((error) =>
      logger.warn(`Handing on an unwanted grant of "${key}" failed; it expires with its lease: ${error.message}`),
    );
  }

  private cancelAtServer(key: string, owner: string): Promise<unknown> {
    return cancelScript
      .run(this.connections.client, this.keysOf(key).all, [owner, key])
      .catch((error) => logger.warn(`Leaving the queue of "${key}" failed; the entry goes stale on its own: ${error.message}`));
  }

  private watch(waiter: RedisWaiter): void {
    let watch = this.watches.get(waiter.key);
    if (!watch) this.watches.set(waiter.key, (watch = { waiters: new Map(), shortestTtlMs: Infinity, checkAt: Infinity }));
    watch.waiters.set(waiter.owner, waiter);
    watch.shortestTtlMs = Math.min(watch.shortestTtlMs, waiter.ttlMs);
  }

  private unwatch(key: string, owner: string): void {
    const watch = this.watches.get(key);
    if (!watch) return;
    watch.waiters.delete(owner);
    if (watch.waiters.size > 0) return;
    clearTimeout(watch.timer);
    this.watches.delete(key);
  }

  /**
   * Schedules the key's safety check: just after the holder's lease would end (a holder that
   * died is noticed then, not a poll later), and at least every checkIntervalMs to stay alive.
   */
  private scheduleCheck(key: string, ownerPttlMs: number, delayMs?: number): void {
    const watch = this.watches.get(key);
    if (!watch || this.closed) return;
    const interval = checkIntervalMs(watch.shortestTtlMs);
    const delay = delayMs ?? (ownerPttlMs >= 0 ? Math.min(interval, ownerPttlMs + EXPIRY_CHECK_MARGIN_MS) : interval);
    const at = performance.now() + delay;
    // A check already due sooner serves this one too: a burst of waiters sets one timer, not one each.
    if (watch.timer && watch.checkAt <= at) return;
    clearTimeout(watch.timer);
    watch.checkAt = at;
    watch.timer = setTimeout(() => {
      watch.timer = undefined;
      void this.check(key, watch);
    }, delay);
    watch.timer.unref();
  }

  private async check(key: string, watch: KeyWatch): Promise<void> {
    const waiters = [...watch.waiters.values()];
    if (waiters.length === 0) return;
    const args: (string | number)[] = [this.clientId, this.staleAfter(key, watch.shortestTtlMs), key];
    for (const waiter of waiters) args.push(waiter.owner, waiter.ttlMs);
    try {
      const [ownerPttlMs, granted, requeued] = await checkScript.run(this.connections.client, this.keysOf(key).all, args);
      for (const owner of requeued) {
        // Back at the tail with a new fence: no longer right behind anyone of ours.
        this.successors.forget(owner);
        const waiter = this.waiting.get(owner);
        if (waiter) waiter.fence = undefined;
      }
      for (let i = 0; i < granted.length; i += 2) this.deliver(key, granted[i], granted[i + 1]);
      this.scheduleCheck(key, ownerPttlMs);
    } catch (error) {
      logger.warn(`Checking the queue of "${key}" failed, retrying: ${(error as Error).message}`);
      this.scheduleCheck(key, -1);
    }
  }

  private shortestTtl(waiters: Iterable<RedisWaiter>): number {
    let shortest = Infinity;
    for (const waiter of waiters) shortest = Math.min(shortest, waiter.ttlMs);
    return shortest;
  }

  private staleAfter(key: string, ttlMs: number): number {
    const watch = this.watches.get(key);
    return staleAfterMs(checkIntervalMs(watch ? Math.min(ttlMs, watch.shortestTtlMs) : ttlMs));
  }

  private keysOf(key: string): LockKeys {
    let keys = this.keyCache.get(key);
    if (!keys) {
      // Names built from unbounded values (order ids) would grow the cache forever: start over.
      if (this.keyCache.size >= KEY_CACHE_SIZE) this.keyCache.clear();
      this.keyCache.set(key, (keys = lockKeys(key)));
    }
    return keys;
  }

  /** A grant now held here: tracked so close() can fire its signal and release it. */
  private grantOf(key: string, owner: string, fence: string, requestedAt?: number, provisional?: LockGrant['provisional']): LockGrant {
    const grant: LockGrant = { key, owner, fencingToken: BigInt(fence), lost: this.closing.signal, requestedAt, provisional };
    this.held.set(owner, grant);
    return grant;
  }

  private assertOpen(): void {
    if (this.closed) throw new DistributedLockError('The redis lock backend is closed.');
  }
}

/** The value of the owner key: the fence makes it unique per grant, the owner id per caller. */
const ownerValue = (fence: bigint | string, owner: string) => `${fence} ${owner}`;

/** Builds the backend for `{ type: 'redis', ... }`; used by createBackend, loaded only when chosen. */
export function createRedisBackend(options: RedisBackendOptions, _settings?: BackendSettings): Promise<RedisLockBackend> {
  return RedisLockBackend.open(options);
}
