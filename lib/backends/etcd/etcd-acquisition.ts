import type { Etcd3, IKeyValue, ITxnRequest, ITxnResponse, Watcher } from 'etcd3';
import { LockBackendError } from '../../errors';
import { conflictingLimit, decide, limitMismatch, type Decision, type EntryValue } from './entry-modes';
import type { LockKeys } from './etcd-keys';
import { entriesAhead, entryEnqueueTxn, entryRecheckTxn, markGrantedTxn } from './etcd-mode-requests';
import { createRevision, delayKeyOf, keysStillTxn, putDelayTxn, rangeKvs } from './etcd-requests';
import type { EtcdSession } from './etcd-session';
import type { LocalFollower, LocalFollowers } from './local-followers';

/** What every acquisition of one backend shares. */
export interface AcquisitionContext {
  readonly client: Etcd3;
  readonly localFollowers: LocalFollowers;
  /** watchSafetyNetMs of the backend's sessions. */
  readonly safetyNetMs: number;
  /** A transaction with the backend's deadline and lease-loss detection. */
  txn(session: EtcdSession, request: ITxnRequest): Promise<ITxnResponse>;
}

/** How the acquisition tells the backend how it ended. */
export interface AcquisitionOutcome {
  /** The grant rule lets our entry go, our key still exists and our session is alive. */
  granted(revision: bigint): void;
  /** Gave up (abort, session lost, error): the caller is told at once. */
  failed(error: unknown): void;
  /**
   * After a failure, once the fate of our put is known: delete our key (fenced on `revision`
   * when we know it). Never before the put has answered, or the delete could land first.
   */
  cleanup(revision: bigint | undefined): void;
}

/** What a try's outcome fails with when its entry would have to wait (its key is then deleted). */
export const NOT_FREE = Symbol('not free');

/** Retry delay for a recheck that failed on the network while the session still lives. */
const RECHECK_RETRY_MS = 200;

/**
 * How long a waiter's watch may stay silent before the waiter reads its predecessor anyway (and
 * again after each such period): half the session ttl, within [0.5 s, 5 s]. The session ttl is
 * the failover time the user chose for a crashed holder; a stalled watch delays a hand-off by at
 * most about half of it, for one single-key read per waiter and period.
 */
export function watchSafetyNetMs(sessionTtlSeconds: number): number {
  return Math.min(5_000, Math.max(500, (sessionTtlSeconds * 1000) / 2));
}

/**
 * One entry waiting in the queue of one lock name, of any mode (etcd's concurrency.Mutex recipe,
 * generalized by the grant rule): put our key, and until the rule lets it go, wait only for the
 * keys whose change can let it go (decide: for a write the key just before ours), never the whole
 * name, so a release wakes one waiter, not a herd. On every wake-up, recheck in one read-only
 * transaction that our key still exists and what is now ahead of it (a key we waited on may have
 * been a waiter that gave up, so another one may remain), and that the session is alive: a waiter
 * whose key or session expired gets an error, never the lock (Jepsen 2020, etcd issue 11456).
 */
export class EtcdAcquisition implements LocalFollower {
  private revision?: bigint;
  /** The watches of the current wait, and the keys of it followed in this process. */
  private watchers: Watcher[] = [];
  private followed: Buffer[] = [];
  /** The current wait's keys (and whether a mark counts), to keep a wait that still fits. */
  private waitingOn?: string;
  private safetyNet?: NodeJS.Timeout;
  private checking = false;
  private checkAgain = false;
  private state: 'waiting' | 'granted' | 'failed' = 'waiting';
  /** The enqueue transaction has answered (or failed): only then can our key be cleaned up. */
  private enqueued = false;
  /** Granted by the rule, and putting its lock-delay key before it tells anyone (grant). */
  private puttingDelay = false;

  constructor(
    private readonly context: AcquisitionContext,
    /** The lock name as the caller gave it (errors name it). */
    private readonly name: string,
    readonly session: EtcdSession,
    readonly keys: LockKeys,
    private readonly entry: EntryValue,
    private readonly outcome: AcquisitionOutcome,
    /** A try: fails with NOT_FREE rather than wait. */
    private readonly onlyIfFree = false,
    /** The entry's lock-delay (its keys then have `delayOwn`), 0 for none. */
    private readonly lockDelayMs = 0,
  ) {}

  /** Our key is in the queue: the enqueue answered with it. */
  get queued(): boolean {
    return this.revision !== undefined;
  }

  /** One round trip: put our key and read what is ahead of it; nothing that holds it back means ours goes. */
  async start(): Promise<void> {
    let response: ITxnResponse;
    try {
      response = await this.context.txn(this.session, entryEnqueueTxn(this.keys, this.session.leaseId, this.entry));
    } catch (error) {
      // The put may have committed before the answer was lost: delete the key by name.
      this.enqueued = true;
      if (this.state === 'failed') return this.outcome.cleanup(undefined);
      return this.fail(error);
    }
    this.enqueued = true;
    if (this.state === 'granted') return;
    const own = response.succeeded ? undefined : rangeKvs(response, 0)[0];
    this.revision = response.succeeded ? BigInt(response.header.revision) : own && createRevision(own);
    if (this.state === 'failed') return this.outcome.cleanup(this.revision);
    if (this.revision === undefined) return this.fail(this.sessionLost());
    if (!response.succeeded) return void this.recheck();
    const ahead = entriesAhead(response, 1, this.revision);
    const { mode, limit } = this.entry;
    // The permits queued or held when we arrived: a later reread may see a permit that is about to reject itself.
    const other = mode === 'permit' ? conflictingLimit(limit!, ahead) : undefined;
    if (other !== undefined) return this.fail(limitMismatch(this.name, limit!, other));
    this.evaluate(heldBack(decide(mode, limit ?? 0, ahead), response), BigInt(response.header.revision), false);
  }

  /**
   * A release in this process read, in the same transaction as its delete, that our key is now
   * the lowest (nothing ahead: every mode goes): that read is the recheck, so no wake-up and no
   * second read are needed.
   */
  grantedByRelease(own: IKeyValue): void {
    if (this.state !== 'waiting') return;
    // Key names are reused (EntrySlots): the read may be of the entry this name had before ours.
    const revision = createRevision(own);
    if (this.revision !== undefined ? revision !== this.revision : revision <= (this.keys.slot?.sinceRevision ?? -1n)) return;
    this.revision = revision;
    this.grant(true);
  }

  /** Gives up waiting (abort, session lost, backend closed). */
  stop(error: unknown): void {
    this.fail(error);
  }

  /** Told by this process that a key we wait on is gone. */
  predecessorGone(): void {
    void this.recheck();
  }

  /** `fromEnqueue`: decided on the enqueue's own read, which no entry behind ours can have waited on. */
  private evaluate(decision: Decision, readRevision: bigint, fromEnqueue: boolean): void {
    if (decision.kind === 'grant') return this.grant(!fromEnqueue);
    if (this.onlyIfFree) return this.fail(NOT_FREE);
    this.follow(decision, readRevision);
  }

  /**
   * Waits for a change of the decision's keys, read at `readRevision`: through this process for a
   * deletion of a key that is ours too (see LocalFollowers), else through a watch.
   */
  private follow({ keys, orMarked }: Extract<Decision, { kind: 'wait' }>, readRevision: bigint): void {
    let target = orMarked ? 'marked' : '';
    for (const kv of keys) target += `\n${kv.key.toString('latin1')}@${kv.create_revision}`;
    if (target === this.waitingOn) return;
    this.unfollow();
    this.waitingOn = target;
    let gone = false;
    const watched: IKeyValue[] = [];
    for (const kv of keys) {
      if (orMarked || kv.lease !== this.session.leaseId) {
        watched.push(kv);
        continue;
      }
      this.followed.push(kv.key);
      if (!this.context.localFollowers.follow(kv, this)) gone = true;
    }
    if (watched.length > 0) this.watch(watched, orMarked, readRevision);
    if (gone) void this.recheck();
  }

  /**
   * Watches from "now" rather than from the revision we read at: etcd serves a watch that starts
   * in the past from a catch-up loop that runs every 100 ms, and until it has caught up, a
   * deletion reaches the watch only at the loop's next run. When anything was written between our
   * read and the watches' start, one read checks that the keys did not change in between.
   */
  private watch(kvs: IKeyValue[], orMarked: boolean, readRevision: bigint): void {
    const watchers = kvs.map((kv) => {
      const builder = this.context.client.watch().key(kv.key);
      // A key that may be marked granted: any change of it (etcd's watch filters only exclude).
      return (orMarked ? builder : builder.only('delete')).watcher();
    });
    this.watchers = watchers;
    const current = () => this.watchers === watchers;
    const wake = () => current() && void this.recheck();
    this.armSafetyNet(watchers, kvs);
    let unconnected = watchers.length;
    let moved = false;
    for (const watcher of watchers) {
      let connections = 0;
      watcher.on('data', () => current() && this.armSafetyNet(watchers, kvs));
      watcher.on('delete', wake);
      watcher.on('put', wake);
      watcher.on('connected', (created: { header: { revision: string } }) => {
        if (!current()) return;
        this.armSafetyNet(watchers, kvs);
        // After a reconnect the stream may have skipped events sent just before it broke.
        if (++connections > 1) return void wake();
        moved ||= BigInt(created.header.revision) !== readRevision;
        if (--unconnected === 0 && moved) this.checkWatched(watchers, kvs);
      });
      // The server cancelled the watch: look again, and follow anew.
      watcher.on('error', () => {
        if (!current()) return;
        this.unfollow();
        void this.recheck();
      });
    }
  }

  /**
   * etcd3's watch streams have no keepalive: a watch carried by a member that stalls (a paused
   * process, a half-open connection) neither errors nor delivers, and its waiter would wait
   * forever after the lock was freed. So a wait whose watches have heard nothing for
   * `safetyNetMs` is backed by a read of the watched keys, served by whichever member answers,
   * and again every `safetyNetMs`. Not the recheck: that one may read the whole queue, and a long
   * queue of waiters would pay for it squared.
   */
  private armSafetyNet(watchers: Watcher[], kvs: IKeyValue[]): void {
    clearTimeout(this.safetyNet);
    this.safetyNet = setTimeout(() => {
      if (watchers !== this.watchers) return;
      this.armSafetyNet(watchers, kvs);
      this.checkWatched(watchers, kvs);
    }, this.context.safetyNetMs);
    this.safetyNet.unref();
  }

  /** One read: when a watched key changed (or we cannot tell), recheck. */
  private checkWatched(watchers: Watcher[], kvs: IKeyValue[]): void {
    this.context.txn(this.session, keysStillTxn(kvs)).then(
      (response) => response.succeeded || watchers !== this.watchers || void this.recheck(),
      () => watchers === this.watchers && void this.recheck(),
    );
  }

  private unfollow(): void {
    clearTimeout(this.safetyNet);
    for (const watcher of this.watchers) watcher.cancel().catch(() => undefined);
    this.watchers = [];
    for (const key of this.followed) this.context.localFollowers.unfollow(key, this);
    this.followed = [];
    this.waitingOn = undefined;
  }

  private async recheck(): Promise<void> {
    if (this.checking) {
      this.checkAgain = true;
      return;
    }
    this.checking = true;
    try {
      do {
        this.checkAgain = false;
        if (this.state !== 'waiting') return;
        if (!this.session.alive) return this.fail(this.sessionLost());
        const response = await this.context.txn(this.session, entryRecheckTxn(this.entry.mode, this.keys, this.revision!));
        if (this.state !== 'waiting') return;
        if (!response.succeeded) return this.fail(this.sessionLost());
        this.evaluate(heldBack(decide(this.entry.mode, this.entry.limit ?? 0, entriesAhead(response, 0, this.revision!)), response), BigInt(response.header.revision), false);
      } while (this.checkAgain);
    } catch {
      // Could not tell (network): look again shortly; a lost session ends the wait meanwhile.
      if (this.state === 'waiting') setTimeout(() => void this.recheck(), RECHECK_RETRY_MS).unref();
    } finally {
      this.checking = false;
    }
  }

  /**
   * `mark`: a permit granted after it may have been waited on rewrites its value as granted,
   * which wakes the permit behind it (decide). Best effort: one that misses it rereads at its safety net.
   */
  private grant(mark: boolean): void {
    if (this.state !== 'waiting' || this.puttingDelay) return;
    if (!this.session.alive) return this.fail(this.sessionLost());
    if (this.keys.delayOwn) return void this.grantWithDelay();
    this.state = 'granted';
    this.unfollow();
    if (mark && this.entry.mode === 'permit') {
      this.context.txn(this.session, markGrantedTxn(this.keys, this.revision!, this.session.leaseId, this.entry)).catch(() => undefined);
    }
    this.outcome.granted(this.revision!);
  }

  /**
   * The rule lets an entry with a lock-delay go: its delay key goes in first (fenced on our lock
   * key), so no caller runs under the lock before a crash of ours would hold the name.
   */
  private async grantWithDelay(): Promise<void> {
    this.puttingDelay = true;
    this.unfollow();
    try {
      const leaseId = await this.session.delayLeaseId(this.lockDelayMs);
      if (this.state !== 'waiting') return;
      const response = await this.context.txn(this.session, putDelayTxn(this.keys, this.revision!, leaseId));
      if (this.state !== 'waiting') return;
      if (!response.succeeded) return this.fail(this.sessionLost());
    } catch (error) {
      return this.fail(error);
    } finally {
      this.puttingDelay = false;
    }
    if (!this.session.alive) return this.fail(this.sessionLost());
    this.state = 'granted';
    this.outcome.granted(this.revision!);
  }

  private fail(error: unknown): void {
    if (this.state !== 'waiting') return;
    this.state = 'failed';
    this.unfollow();
    this.outcome.failed(error);
    if (this.enqueued) this.outcome.cleanup(this.revision);
  }

  private sessionLost(): Error {
    return new LockBackendError('etcd', 'keep its place in the queue', this.session.reason ?? new Error('the lock key was deleted: its session lease expired'));
  }
}

/**
 * A grant the rule allows is held back while the name has a lock-delay key (read last by the
 * transaction): a holder's lease ran out unreleased less than its delay ago. The entry waits for
 * that key's deletion, which etcd makes when the key's lease runs out.
 */
function heldBack(decision: Decision, response: ITxnResponse): Decision {
  if (decision.kind !== 'grant') return decision;
  const delay = delayKeyOf(response);
  return delay ? { kind: 'wait', keys: [delay], orMarked: false } : decision;
}
