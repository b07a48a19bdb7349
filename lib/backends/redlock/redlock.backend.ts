import { randomBytes } from 'node:crypto';
import { LockBackendError } from '../../errors';
import { DEFAULT_SERVER_TIMEOUT_MS, DEFAULT_TTL_MS } from '../../lock-defaults';
import type { BackendSettings } from '../backend-definition';
import type { AcquireRequest, LockBackend, LockGrant, LockInspection } from '../lock-backend.interface';
import { LocalQueueBackend } from '../../queue/local-queue-backend';
import { RedlockAcquisition, UNREACHABLE_RETRY_MS, type AcquisitionReport, type AcquisitionTiming } from './redlock-acquisition';
import { RedlockBatch } from './redlock-batch';
import { forceReleaseRedlock, inspectRedlock } from './redlock-inspect';
import { describeRedlockHolders } from './redlock-holder-records';
import { describedInspection, RedisHolderRecords } from '../redis/redis-holder-records';
import { RedlockMasters } from './redlock-masters';
import {
  DEFAULT_DRIFT_FACTOR,
  DEFAULT_REQUEST_TIMEOUT_MS,
  DEFAULT_RETRY_JITTER_MS,
  validateRedlockOptions,
  type RedlockBackendOptions,
} from './redlock-options';
import { WAKE_CHANNEL_PREFIX } from './redlock-scripts';
import { fenceToRaise, RedlockVotes } from './redlock-votes';

/** The longest a waiter goes without voting again, in case a master's word was lost. */
const SAFETY_NET_MS = 1_000;

let trySeq = 0;

/**
 * Redlock over N independent Redis masters (docs/redlock.md): a lock is held while a majority
 * of masters granted the same entry within its validity. A process's callers of one name share
 * one entry (LocalQueues): the entry votes, and its callers take turns under it.
 *
 * Fencing token: `(fence << 16) + turn`, where fence is the highest per-master counter among
 * the granting majority, written back so that a majority is at or above it before the grant is
 * returned; any two majorities share a master, so a later grant counts above it. This holds
 * only while every master keeps its counter and its lock keys: a master restarted without
 * `appendfsync always` (or its keys evicted), or clocks that jump or drift beyond driftFactor,
 * can let two holders in at once and give a later grant a lower token.
 */
export class RedlockLockBackend extends LocalQueueBackend<RedlockBatch> implements LockBackend {
  readonly name = 'redlock';
  /** Leaves room for the suffixes of the fence and waiter keys. */
  readonly maxKeyBytes = 1000;
  readonly address: string;
  /** Each master keeps a delay key beside the lock key (redlock-scripts.ts): a majority refuses until it ran out. */
  readonly lockDelay = true;
  /** A release's round ends within serverTimeoutMs: every command of it is bounded by that (RedisConnections). */
  readonly boundedRelease = true;
  /** This process on the masters: its wake channel and its place among a name's waiters. */
  private readonly waiterId = randomBytes(12).toString('base64url');
  private readonly masters: RedlockMasters;
  private readonly votes: RedlockVotes;
  /** The batch of each name that is voting or waiting for a word (one per name: LocalQueues sends one at a time). */
  private readonly waiting = new Map<string, RedlockAcquisition>();
  /**
   * Every grant's lost signal: aborted only at close(). A holder whose entry lost its majority
   * learns it from its renewal (renew() answers false), so one signal serves them all, and no
   * AbortController is made per lock.
   */
  private readonly closing = new AbortController();
  private readonly timing: AcquisitionTiming;
  private readonly releasing = new Set<Promise<void>>();
  /** This process's holder description on every master, for inspect(); none without a holderDescription. */
  private readonly records?: RedisHolderRecords;

  constructor(
    options: RedlockBackendOptions,
    private readonly settings: BackendSettings,
  ) {
    // A vote goes out with its first caller (while the caller sets up its wait): an uncontended
    // acquisition waits for nothing. A burst's callers arrive in one tick and still share a vote.
    super('redlock', { sendSoon: (send) => process.nextTick(send), sendFirstAtOnce: true });
    const requestTimeoutMs = options.requestTimeoutMs ?? DEFAULT_REQUEST_TIMEOUT_MS;
    const driftFactor = options.driftFactor ?? DEFAULT_DRIFT_FACTOR;
    this.masters = new RedlockMasters(options, settings, requestTimeoutMs, settings.serverTimeoutMs, WAKE_CHANNEL_PREFIX + this.waiterId, this.onWord, this.onResubscribed);
    this.address = this.masters.addresses.join(', ');
    this.votes = new RedlockVotes(this.masters, (ttlMs) => ttlMs * driftFactor + 2);
    this.timing = {
      serverTimeoutMs: settings.serverTimeoutMs,
      retryJitterMs: options.retryJitterMs ?? DEFAULT_RETRY_JITTER_MS,
      safetyNetMs: SAFETY_NET_MS,
      staleAfterMs: 3 * SAFETY_NET_MS + requestTimeoutMs,
    };
    if (settings.holderDescription !== undefined) this.records = new RedisHolderRecords(this.masters.connections, settings.keyPrefix, this.waiterId, settings.holderDescription);
  }

  /** The masters' clocks may run ahead of ours by driftFactor: every local deadline allows for it. */
  driftAllowanceMs(ttlMs: number): number {
    return this.votes.driftMs(ttlMs);
  }

  /** More masters down than a majority can spare (from connection states: no round trip). */
  unreachable(): Error | undefined {
    return this.masters.unreachable();
  }

  /** The majority's view, asked of every master: see redlock-inspect.ts; then the holder's description (redlock-holder-records.ts). */
  async inspect(key: string): Promise<LockInspection> {
    return describedInspection(await inspectRedlock(this.masters, key), (holders) => describeRedlockHolders(this.masters, this.settings.keyPrefix, holders));
  }

  forceRelease(key: string): Promise<boolean> {
    return forceReleaseRedlock(this.masters, key);
  }

  /** PING on every master; up once a majority answers (RedlockMasters.ping). */
  async ping(): Promise<void> {
    this.lifecycle.assertOpen();
    await this.masters.ping();
  }

  /**
   * One vote, never queued. Null when a majority refused; LockServerUnreachableError naming the
   * masters that did not answer when too few answered to tell for serverTimeoutMs.
   */
  protected async tryTake(request: Omit<AcquireRequest, 'signal'>): Promise<LockGrant | null> {
    const { key, owner, ttlMs } = request;
    const batch = new RedlockBatch(key, `${this.waiterId}~t${(trySeq++).toString(36)}`);
    batch.ttlMs = ttlMs;
    batch.lockDelayMs = request.lockDelayMs ?? 0;
    const startedAt = performance.now();
    let vote = await this.votes.vote(key, batch.id, ttlMs, '', this.timing.staleAfterMs, 0, false, batch.lockDelayMs);
    // Too few answers is "cannot tell", not "busy": vote again until serverTimeoutMs says the masters are down.
    while (!vote.won && vote.unreachable && performance.now() - startedAt < this.settings.serverTimeoutMs && this.lifecycle.isOpen) {
      await new Promise((resolve) => setTimeout(resolve, UNREACHABLE_RETRY_MS));
      vote = await this.votes.vote(key, batch.id, ttlMs, '', this.timing.staleAfterMs, 0, false, batch.lockDelayMs);
    }
    if (!vote.won) {
      if (vote.unreachable) throw vote.unreachable;
      return null;
    }
    batch.leaseFrom = vote.sentAt;
    batch.won = vote;
    if (!this.lifecycle.isOpen || this.queues.has(key)) {
      // Closed, or callers of this process queued meanwhile: a try does not go ahead of them.
      this.votes.giveBack(key, batch.id, '');
      if (!this.lifecycle.isOpen) this.lifecycle.assertOpen();
      return null;
    }
    this.queues.adopt(batch, vote.token, { owner, lockDelayMs: request.lockDelayMs });
    return this.grant(batch, request);
  }

  /** Extends the entry on every master; true only with a majority, within the validity. */
  async renew(grant: LockGrant, ttlMs: number): Promise<boolean> {
    const held = this.heldFor(grant);
    if (!held) return false;
    const { batch } = held;
    const sentAt = performance.now();
    const renewal = await this.votes.renew(batch.key, batch.id, ttlMs, batch.lockDelayMs);
    if (renewal === 'renewed') {
      this.extended(batch, sentAt, ttlMs);
      return true;
    }
    if (renewal !== 'refused') throw renewal;
    this.held.delete(grant.owner);
    this.entryLost(batch);
    return false;
  }

  async close(): Promise<void> {
    if (!this.lifecycle.beginClose()) return;
    const heldError = this.lifecycle.closedWhileHeld();
    const holding = [...this.queues.batches()].filter((batch) => batch.state === 'holding');
    this.queues.closeAll(this.lifecycle.closedWhileWaiting());
    this.closing.abort(heldError);
    this.held.clear();
    for (const batch of holding) this.releaseEntry(batch).catch(() => undefined);
    // The releases must leave before the connections close; a dead master does not hold us up.
    const released = Promise.allSettled([...this.releasing, this.records?.remove()]);
    await Promise.race([released, new Promise((resolve) => setTimeout(resolve, this.settings.serverTimeoutMs).unref())]);
    this.masters.close();
  }

  /** BatchEntries: the batch's entry starts voting at once, and waits for words between votes. */
  send(batch: RedlockBatch): void {
    const acquisition = new RedlockAcquisition(this.votes, batch, this.waiterId, this.timing, this.report);
    batch.acquisition = acquisition;
    this.waiting.set(batch.key, acquisition);
    acquisition.start();
  }

  /** What a batch's acquisition ends with: made once, not per acquisition. */
  private readonly report: AcquisitionReport = {
    won: (batch, vote) => {
      this.waiting.delete(batch.key);
      batch.leaseFrom = vote.sentAt;
      batch.won = vote;
      this.queues.holds(batch, vote.token);
    },
    failed: (batch, error) => {
      this.waiting.delete(batch.key);
      this.queues.end(batch, error);
    },
  };

  /** BatchEntries: its callers all left (or we close): stop voting, give back anything won, leave the waiters. */
  withdraw(batch: RedlockBatch, reason: unknown): void {
    batch.acquisition?.stop();
    if (this.waiting.get(batch.key) === batch.acquisition) this.waiting.delete(batch.key);
    this.votes.giveBack(batch.key, batch.id, this.waiterId);
    this.votes.leave(batch.key, this.waiterId);
    this.queues.end(batch, reason);
  }

  /** BatchEntries: nobody of the batch is left: release the entry on every master. */
  remove(batch: RedlockBatch): Promise<void> {
    return this.releaseEntry(batch);
  }

  /** BatchEntries: a holder let go without knowing its lease valid: a renewal tells whether the entry still holds a majority. */
  async confirm(batch: RedlockBatch): Promise<true | Error> {
    const sentAt = performance.now();
    const renewal = await this.votes.renew(batch.key, batch.id, batch.ttlMs, batch.lockDelayMs);
    if (renewal === 'renewed') {
      this.extended(batch, sentAt, batch.ttlMs);
      return true;
    }
    this.releaseEntry(batch).catch(() => undefined);
    return renewal === 'refused' ? this.majorityGone('keep the lock') : renewal;
  }

  usable(batch: RedlockBatch): boolean {
    return !batch.lost;
  }

  /**
   * BatchEntries: the grant of a caller served under the entry. Its lease is the entry's: it
   * ends when the entry's does. When too little of that is left for the caller's own renewal
   * to come first, the entry is extended now and the grant is provisional until then.
   */
  grant(batch: RedlockBatch, request: Pick<AcquireRequest, 'key' | 'owner' | 'ttlMs'>): LockGrant {
    const { key, owner, ttlMs } = request;
    const entryEnds = batch.leaseFrom + batch.ttlMs - this.votes.driftMs(batch.ttlMs);
    // The lease's local deadline is requestedAt + ttlMs - drift(ttlMs): make that the entry's end.
    const requestedAt = entryEnds - ttlMs + this.votes.driftMs(ttlMs);
    let grant: LockGrant = { key, owner, fencingToken: batch.token(), lost: this.closing.signal, requestedAt };
    if (entryEnds - performance.now() < ttlMs / 2) {
      const sentAt = performance.now();
      const recorded = this.votes.renew(batch.key, batch.id, ttlMs, batch.lockDelayMs).then((renewal) => {
        if (renewal === 'refused') return undefined;
        if (renewal !== 'renewed') return new Promise<never>(() => undefined); // could not tell: the lease's own renewals go on until its deadline
        this.extended(batch, sentAt, ttlMs);
        return sentAt;
      });
      grant = { ...grant, provisional: { validUntil: entryEnds, recorded } };
    }
    this.held.set(owner, { grant, batch });
    return grant;
  }

  /**
   * A master's word that `key` is free: the batch waiting for it votes now. The other masters'
   * words for the same release often come after that vote won: those are dropped. A word for a
   * name this process has nothing of is passed on (its waiter there was stale).
   */
  private readonly onWord = (master: number, key: string): void => {
    const acquisition = this.waiting.get(key);
    if (acquisition) return acquisition.wake();
    if (!this.lifecycle.isOpen || this.queues.has(key)) return;
    this.votes.leave(key, this.waiterId, this.masters.addresses.map((_, index) => index === master));
  };

  /** Words published while a subscriber was away are lost: every waiting batch votes again. */
  private readonly onResubscribed = (): void => {
    for (const acquisition of this.waiting.values()) acquisition.wake();
  };

  private extended(batch: RedlockBatch, sentAt: number, ttlMs: number): void {
    if (sentAt + ttlMs - this.votes.driftMs(ttlMs) < batch.leaseFrom + batch.ttlMs - this.votes.driftMs(batch.ttlMs)) return;
    batch.leaseFrom = sentAt;
    batch.ttlMs = ttlMs;
  }

  /** The entry no longer holds a majority: its holders learn it from renew, its waiting callers now. */
  private entryLost(batch: RedlockBatch): void {
    batch.lost = true;
    this.queues.end(batch, this.majorityGone('keep the lock'));
  }

  /** Releases the entry on every master; tracked until the masters answer, for close(). */
  private releaseEntry(batch: RedlockBatch): Promise<void> {
    let settle!: (error?: Error) => void;
    const released = new Promise<void>((resolve, reject) => {
      settle = (error) => {
        this.releasing.delete(released);
        if (error) reject(error);
        else resolve();
      };
    });
    this.releasing.add(released);
    this.votes.releaseTo(batch.key, batch.id, batch.won ? fenceToRaise(batch.won) : batch.entryToken, settle);
    return released;
  }

  private majorityGone(operation: string): LockBackendError {
    return new LockBackendError('redlock', operation, new Error('a majority of masters no longer hold this entry (its keys expired, or a master lost them)'), this.address);
  }

  /** Its entry's id names this process on the masters, and the batch. */
  protected newBatch(name: string, id: string): RedlockBatch {
    return new RedlockBatch(name, this.waiterId + id);
  }
}

/** Validates before any I/O; ioredis is loaded by the masters' connections (an optional peer). Never waits for a master. */
export function createRedlockBackend(
  options: RedlockBackendOptions,
  settings: BackendSettings = { ttlMs: DEFAULT_TTL_MS, serverTimeoutMs: DEFAULT_SERVER_TIMEOUT_MS },
): RedlockLockBackend {
  validateRedlockOptions(options);
  return new RedlockLockBackend(options, settings);
}

