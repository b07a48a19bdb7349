import { Logger } from '@nestjs/common';
import { randomBytes } from 'node:crypto';
import { BackendLifecycle } from '../backend-lifecycle';
import type { BackendSettings } from '../backend-definition';
import type { AcquireRequest, LockBackend, LockGrant } from '../lock-backend.interface';
import { DEFAULT_SERVER_TIMEOUT_MS, DEFAULT_TTL_MS } from '../../lock-defaults';
import { LocalSuccessors } from './local-successors';
import { RedisWaiter, type WaiterEvents } from './redis-waiter';
import { RedisConnections } from './redis-connection';
import { parseGrantMessage } from './redis-grant-message';
import { GRANT_CHANNEL_PREFIX, type QueuedReply } from './redis-lock-scripts';
import { validateRedisOptions, type RedisBackendOptions } from './redis-options';
import { ownerValue, RedisCommands } from './redis-commands';
import { KeyWatches, type KeyWatch } from './redis-key-watches';
import { HandOverRuns, type HandOverRun } from './hand-over-runs';

/**
 * A holder hands the lock to a waiter of its own process only when its lease is known valid at
 * least this much longer: the waiter runs under that lease until Redis has recorded the
 * hand-over (one round trip later), so a lease about to end is better handed on by Redis.
 */
const MIN_HANDOVER_VALIDITY_MS = 50;
/** Callers per batched acquire script and per transfer script: Lua's unpack() has a stack limit. */
const MAX_PER_SCRIPT = 500;
/**
 * A grant whose lease, counted from a moment known to precede it, has less than this share of
 * its ttl left is confirmed with the server before the caller gets it: the lease's first
 * renewal comes a third of the ttl after the grant, too late for a shorter remainder.
 */
const LATE_GRANT_SHARE = 1 / 3;

const logger = new Logger('DistributedLock');

/**
 * Redis (single node, Sentinel or Cluster): a FIFO queue per lock name with direct handoff.
 * The release script makes the next waiter the owner and publishes the grant on that waiter's
 * process channel, so a waiter owns the lock when the message arrives. See docs/redis.md.
 */
export class RedisLockBackend implements LockBackend {
  readonly name = 'redis';
  /** Names are percent-encoded into the hash tag (up to 3x); Redis takes far longer keys. */
  readonly maxKeyBytes = 1024;
  readonly address: string;
  /** 96 random bits, short: it names the grant channel and goes with every queued waiter. */
  private readonly clientId = randomBytes(12).toString('base64url');
  private readonly channel = GRANT_CHANNEL_PREFIX + this.clientId;
  private readonly waiting = new Map<string, RedisWaiter>();
  private readonly watches = new KeyWatches((key, watch) => void this.check(key, watch));
  private readonly held = new Map<string, LockGrant>();
  private readonly successors = new LocalSuccessors();
  private readonly waiterEvents: WaiterEvents = {
    settled: (waiter, granted) => {
      if (!this.waiting.delete(waiter.owner)) return false;
      if (granted) this.successors.granted(waiter.owner);
      else this.successors.left(waiter.owner);
      this.watches.remove(waiter.key, waiter.owner);
      return true;
    },
    abandoned: (waiter) => void this.commands.cancel(waiter.key, waiter.owner),
  };
  /** Per key, the hand-overs inside this process that Redis has not been told of yet. */
  private readonly runs = new HandOverRuns({
    transfer: (key, args) => this.commands.transfer(key, args),
    release: (key, fence, owner) => this.commands.release(key, ownerValue(fence, owner)),
    takeBack: (key, owner, fence) => {
      if (this.held.get(owner)?.fencingToken === BigInt(fence)) this.held.delete(owner);
      return this.commands.cancel(key, owner);
    },
  });
  /**
   * Per key, the acquisitions of this tick after the first (which went out at once): sent
   * together at the end of the tick, in one script (see sendBatch).
   */
  private readonly batches = new Map<string, RedisWaiter[]>();
  /**
   * Redis cannot tell us a lease is gone without being asked (renewal asks), so the only loss the
   * backend reports itself is its own closing: one signal shared by every grant, fired by close().
   */
  private readonly closing = new AbortController();
  private readonly lifecycle = new BackendLifecycle('redis');
  private readonly connections: RedisConnections;
  private readonly commands: RedisCommands;

  /**
   * Validates and starts connecting in the background: never waits for the server (see
   * docs/redis.md, "When the server is down"). Use createRedisBackend().
   */
  constructor(options: RedisBackendOptions, settings: BackendSettings) {
    validateRedisOptions(options);
    this.connections = new RedisConnections(options, settings, this.channel, () => {
      // Grants published while the subscriber was reconnecting are lost: check every waiting key now.
      for (const key of this.watches.keys()) this.watches.schedule(key, -1, 0);
    });
    this.commands = new RedisCommands(this.connections, this.clientId);
    this.address = this.connections.address;
    this.listen();
  }

  unreachable(): Error | undefined {
    return this.connections.unreachable();
  }

  acquire(request: AcquireRequest): Promise<LockGrant> {
    try {
      this.lifecycle.assertOpen();
    } catch (error) {
      return Promise.reject(error);
    }
    // Until the grant channel is subscribed a pushed grant would be lost: wait for it, bounded.
    if (!this.connections.subscribed) return this.connections.whenSubscribed(`acquire "${request.key}"`, request.signal).then(() => this.acquire(request));
    const { key, owner } = request;
    const waiter = new RedisWaiter(key, owner, Math.ceil(request.ttlMs), request, this.waiterEvents);
    // Registered before this tick ends, so before any grant message (which can overtake the
    // script's reply) can be read.
    this.waiting.set(owner, waiter);
    const batch = this.batches.get(key);
    if (batch && batch.length < MAX_PER_SCRIPT) {
      batch.push(waiter);
      return waiter.promise;
    }
    if (batch) this.sendBatch(key);
    // The first acquisition of a key in a tick goes out at once; later ones wait for the batch.
    this.batches.set(key, []);
    process.nextTick(() => this.sendBatch(key));
    this.sendAcquire(waiter);
    return waiter.promise;
  }

  /** One acquisition alone: the acquire script. */
  private sendAcquire(waiter: RedisWaiter): void {
    const sentAt = performance.now();
    this.commands.acquire(waiter.key, waiter.owner, waiter.ttlMs, this.watches.staleAfter(waiter.key, waiter.ttlMs), true).then(
      (reply) => this.onQueued(waiter, reply, sentAt),
      (error) => this.acquireFailed(waiter, error),
    );
  }

  /**
   * The acquire script failed or went unanswered. It may still run at the server (a paused
   * server wakes up): a cancel sent after it on the same connection takes that grant or queue
   * entry back.
   */
  private acquireFailed(waiter: RedisWaiter, error: unknown): void {
    waiter.settle(undefined, error);
    void this.commands.cancel(waiter.key, waiter.owner, true);
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
    this.commands.acquireBatch(key, this.watches.staleAfter(key, this.shortestTtl(waiters)), waiters).then(
      (replies) => waiters.forEach((waiter, i) => this.onQueued(waiter, replies[i], sentAt)),
      (error) => waiters.forEach((waiter) => this.acquireFailed(waiter, error)),
    );
  }

  /** The acquire script's answer for `waiter`: granted, or queued behind someone. */
  private onQueued(waiter: RedisWaiter, reply: [1, string] | [0, number] | QueuedReply, sentAt: number): void {
    const { key, owner } = waiter;
    waiter.answered = true;
    if (this.waiting.get(owner) !== waiter) {
      // Gave up (or granted by a message that came first): a grant here is handed on at once.
      if (reply[0] === 1) this.deliver(key, owner, reply[1]);
      return;
    }
    if (reply[0] === 1) return this.grantFrom(waiter, reply[1], sentAt);
    const [, ownerPttlMs, fence, ahead, serverMs] = reply as QueuedReply;
    waiter.fence = fence;
    if (!waiter.listenForAbort()) return;
    if (this.waiting.has(ahead) || this.held.has(ahead)) this.successors.link(ahead, owner);
    this.watches.add(waiter).clock.sample(serverMs, sentAt);
    this.watches.schedule(key, ownerPttlMs);
  }

  async tryAcquire({ key, owner, ttlMs }: Omit<AcquireRequest, 'signal'>): Promise<LockGrant | null> {
    this.lifecycle.assertOpen();
    const sentAt = performance.now();
    const ttl = Math.ceil(ttlMs);
    try {
      const reply = await this.commands.acquire(key, owner, ttl, this.watches.staleAfter(key, ttl), false);
      if (reply[0] !== 1) return null;
      // The reply came so late (a paused process) that the lease may be nearly over: ask first.
      const requestedAt = this.isLate(sentAt, ttl) ? await this.confirm(key, owner, reply[1], ttl) : sentAt;
      return requestedAt === undefined ? null : this.grantOf(key, owner, reply[1], requestedAt);
    } catch (error) {
      // The script may still run (a paused server wakes up): the cancel, sent after it, gives back what it took.
      void this.commands.cancel(key, owner, true);
      throw error;
    }
  }

  async renew(grant: LockGrant, ttlMs: number): Promise<boolean> {
    if (!this.lifecycle.isOpen) return false;
    this.runs.tell(grant.key);
    const renewed = await this.commands.renew(grant.key, ownerValue(grant.fencingToken, grant.owner), Math.ceil(ttlMs));
    return renewed === 1;
  }

  /**
   * When the waiter right behind this holder in the queue is ours, it holds the lock from now
   * (see handOver); otherwise the release script hands the lock on through Redis.
   */
  release(grant: LockGrant, validForMs?: number): Promise<void> {
    // close() released what was held; the connections are gone.
    if (this.connections.closed) return Promise.resolve();
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
    this.runs.tell(grant.key);
    if (handOver) {
      const started = this.runs.start(grant);
      this.handOver(started, next!, validForMs!);
      return started.done;
    }
    return this.commands.release(grant.key, ownerValue(grant.fencingToken, grant.owner));
  }

  async close(): Promise<void> {
    if (!this.lifecycle.beginClose()) return;
    const waitError = this.lifecycle.closedWhileWaiting();
    const pending: Promise<unknown>[] = [];
    for (const waiter of [...this.waiting.values()]) {
      waiter.settle(undefined, waitError);
      pending.push(this.commands.cancel(waiter.key, waiter.owner, true));
    }
    this.runs.tellAll();
    this.watches.clear();
    this.closing.abort(this.lifecycle.closedWhileHeld());
    this.successors.clear();
    for (const grant of [...this.held.values()]) pending.push(this.release(grant).catch(() => undefined));
    // Best effort, and never long: with the server unreachable, leases and queue entries expire on their own.
    if (this.connections.unreachable() === undefined) {
      await Promise.race([Promise.all(pending), new Promise((resolve) => setTimeout(resolve, Math.min(2_000, this.connections.serverTimeoutMs)).unref())]);
    }
    this.connections.close();
  }

  /**
   * The waiter right behind the run's current holder in the queue is ours: it holds the lock
   * from now, with the fence it queued with, under the previous holder's lease (`validForMs`)
   * until Redis has recorded the run (LockGrant.provisional). No message, no round trip: a queue
   * of this process's callers moves at the speed of the process, in FIFO order.
   */
  private handOver(run: HandOverRun, to: RedisWaiter, validForMs: number): void {
    to.settle(this.grantOf(run.from.key, to.owner, to.fence!, undefined, this.runs.extend(run, to.owner, to.fence!, validForMs)));
  }

  private listen(): void {
    this.connections.subscriber.on('message', (channel: string, message: string) => {
      if (channel !== this.channel) return;
      // Anything else published on our channel is not ours to act on, and must not throw in ioredis' emitter.
      const grant = parseGrantMessage(message);
      if (grant) this.grantLate(grant.key, grant.owner, grant.fence, grant.serverMs);
    });
  }

  /**
   * A grant that came by a message or a safety check: the lease began at the server before we
   * heard of it, when the server's clock read `serverMs` (undefined: not known), and runs for the
   * waiter's ttl from then. It counts from the latest local moment known to precede that (the
   * waiter's own request, or `serverMs` mapped through the key's ServerClock); when that leaves
   * less than LATE_GRANT_SHARE of the lease, the grant is confirmed with the server first.
   */
  private grantLate(key: string, owner: string, fence: string, serverMs: number | undefined): void {
    const waiter = this.waiting.get(owner);
    if (!waiter) return this.deliver(key, owner, fence);
    const clock = this.watches.get(key)?.clock;
    this.grantFrom(waiter, fence, Math.max(waiter.askedAt, serverMs === undefined || !clock ? -Infinity : clock.earliestLocal(serverMs)));
  }

  /** The grant to `waiter`, its lease counted from `requestedAt`; confirmed with the server first when that leaves too little. */
  private grantFrom(waiter: RedisWaiter, fence: string, requestedAt: number): void {
    const { key, owner } = waiter;
    if (waiter.confirming) return;
    if (!this.isLate(requestedAt, waiter.ttlMs)) return this.deliver(key, owner, fence, requestedAt);
    waiter.confirming = true;
    void this.confirm(key, owner, fence, waiter.ttlMs).then(
      (confirmedAt) => {
        waiter.confirming = false;
        // Gave up meanwhile: its cancel, sent after the renewal, hands the lock on.
        if (this.waiting.get(owner) !== waiter) return;
        if (confirmedAt !== undefined) return this.deliver(key, owner, fence, confirmedAt);
        // The lease ran out before we heard of it. A queued waiter is put back in the queue by
        // the safety check; one granted at once asks again; one whose reply is still to come is
        // queued by it.
        if (this.watches.get(key)?.waiters.has(owner)) this.watches.schedule(key, -1, 0);
        else if (waiter.answered) this.sendAcquire(waiter);
      },
      (error) => {
        waiter.confirming = false;
        waiter.settle(undefined, error);
        void this.commands.cancel(key, owner, true);
      },
    );
  }

  private isLate(requestedAt: number, ttlMs: number): boolean {
    return requestedAt + ttlMs - performance.now() < ttlMs * LATE_GRANT_SHARE;
  }

  /**
   * An owner-checked renewal of a grant that came late: resolves with when it was sent (the
   * lease counts from then), or undefined when the lease is no longer ours.
   */
  private async confirm(key: string, owner: string, fence: string, ttlMs: number): Promise<number | undefined> {
    const sentAt = performance.now();
    const renewed = await this.commands.renew(key, ownerValue(fence, owner), ttlMs, 'confirm a late grant of');
    return renewed === 1 ? sentAt : undefined;
  }

  /** A grant for `owner`: to its waiter if it still waits, else (it gave up) handed on at once. */
  private deliver(key: string, owner: string, fence: string, requestedAt?: number): void {
    const waiter = this.waiting.get(owner);
    if (waiter) return waiter.settle(this.grantOf(key, owner, fence, requestedAt));
    if (this.held.has(owner)) return; // the same grant seen twice (message and safety check)
    this.commands.release(key, ownerValue(fence, owner)).catch((error) =>
      logger.warn(`Handing on an unwanted grant of "${key}" failed; it expires with its lease: ${error.message}`),
    );
  }

  private async check(key: string, watch: KeyWatch): Promise<void> {
    const waiters = [...watch.waiters.values()];
    if (waiters.length === 0 || !this.lifecycle.isOpen) return;
    const sentAt = performance.now();
    try {
      const [ownerPttlMs, granted, requeued, serverMs] = await this.commands.check(key, this.watches.staleAfter(key, watch.shortestTtlMs), waiters);
      watch.clock.sample(serverMs, sentAt);
      for (const owner of requeued) {
        // Back at the tail with a new fence: no longer right behind anyone of ours.
        this.successors.forget(owner);
        const waiter = this.waiting.get(owner);
        if (waiter) waiter.fence = undefined;
      }
      // Granted at some earlier time: the lease ends ownerPttlMs after serverMs, so it began a ttl before that.
      for (let i = 0; i < granted.length; i += 2) {
        const waiter = this.waiting.get(granted[i]);
        this.grantLate(key, granted[i], granted[i + 1], waiter ? serverMs + ownerPttlMs - waiter.ttlMs : undefined);
      }
      this.watches.schedule(key, ownerPttlMs);
    } catch (error) {
      logger.warn(`Checking the queue of "${key}" failed, retrying: ${(error as Error).message}`);
      this.watches.schedule(key, -1);
    }
  }

  private shortestTtl(waiters: Iterable<RedisWaiter>): number {
    let shortest = Infinity;
    for (const waiter of waiters) shortest = Math.min(shortest, waiter.ttlMs);
    return shortest;
  }

  /** A grant now held here: tracked so close() can fire its signal and release it. */
  private grantOf(key: string, owner: string, fence: string, requestedAt?: number, provisional?: LockGrant['provisional']): LockGrant {
    const grant: LockGrant = { key, owner, fencingToken: BigInt(fence), lost: this.closing.signal, requestedAt, provisional };
    this.held.set(owner, grant);
    return grant;
  }
}

/**
 * Builds the backend for `{ type: 'redis', ... }`; used by createBackend, loaded only when chosen.
 * Resolves at once: the connections open in the background.
 */
export async function createRedisBackend(options: RedisBackendOptions, settings: BackendSettings = { ttlMs: DEFAULT_TTL_MS, serverTimeoutMs: DEFAULT_SERVER_TIMEOUT_MS }): Promise<RedisLockBackend> {
  return new RedisLockBackend(options, settings);
}
