import type { Etcd3, IKeyValue, ITxnRequest, ITxnResponse, Watcher } from 'etcd3';
import { LockBackendError } from '../../errors';
import type { LockKeys } from './etcd-keys';
import { createRevision, enqueueTxn, keyStillTxn, rangeKvs, recheckTxn } from './etcd-requests';
import type { EtcdSession } from './etcd-session';
import type { LocalFollower, LocalFollowers } from './local-followers';

/** How the acquisition tells the backend how it ended. */
export interface AcquisitionOutcome {
  /** Our key is the lowest, our key still exists and our session is alive. */
  granted(revision: bigint): void;
  /** Gave up (abort, session lost, error): the caller is told at once. */
  failed(error: unknown): void;
  /**
   * After a failure, once the fate of our put is known: delete our key (fenced on `revision`
   * when we know it). Never before the put has answered, or the delete could land first.
   */
  cleanup(revision: bigint | undefined): void;
}

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
 * One waiter in the queue of one lock name (etcd's concurrency.Mutex recipe): put our key, and
 * while it is not the lowest, wait only for the deletion of the key just before it (no herd).
 * On every wake-up, recheck in one read-only transaction that our key still exists and which key
 * is now before it (the predecessor may have been a waiter that gave up, so another one may
 * remain), and that the session is alive: a waiter whose key or session expired gets an error,
 * never the lock (Jepsen 2020, etcd issue 11456).
 */
export class EtcdAcquisition implements LocalFollower {
  private revision?: bigint;
  private watcher?: Watcher;
  private safetyNet?: NodeJS.Timeout;
  private predecessor?: Buffer;
  private checking = false;
  private checkAgain = false;
  private state: 'waiting' | 'granted' | 'failed' = 'waiting';
  /** The enqueue transaction has answered (or failed): only then can our key be cleaned up. */
  private enqueued = false;

  constructor(
    private readonly client: Etcd3,
    readonly session: EtcdSession,
    readonly keys: LockKeys,
    /** A transaction with the backend's deadline and lease-loss detection. */
    private readonly txn: (request: ITxnRequest) => Promise<ITxnResponse>,
    private readonly localFollowers: LocalFollowers,
    private readonly outcome: AcquisitionOutcome,
    /** watchSafetyNetMs of the session. */
    private readonly safetyNetMs: number,
  ) {}

  /** Our key is in the queue: the enqueue answered with it. */
  get queued(): boolean {
    return this.revision !== undefined;
  }

  /** One round trip: put + read the key before ours; none means the lock is ours. */
  async start(): Promise<void> {
    let response: ITxnResponse;
    try {
      response = await this.txn(enqueueTxn(this.keys, this.session.leaseId));
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
    const before = rangeKvs(response, 1).find((kv) => createRevision(kv) < this.revision!);
    if (!before) return this.grant();
    this.follow(before, this.revision);
  }

  /**
   * A release in this process read, in the same transaction as its delete, that our key is now
   * the lowest: that read is the recheck, so no wake-up and no second read are needed.
   */
  grantedByRelease(own: IKeyValue): void {
    if (this.state !== 'waiting') return;
    // Key names are reused (EntrySlots): the read may be of the entry this name had before ours.
    const revision = createRevision(own);
    if (this.revision !== undefined ? revision !== this.revision : revision <= (this.keys.slot?.sinceRevision ?? -1n)) return;
    this.revision = revision;
    this.grant();
  }

  /** Gives up waiting (abort, session lost, backend closed). */
  stop(error: unknown): void {
    this.fail(error);
  }

  /** Told by this process that our predecessor's key is gone. */
  predecessorGone(): void {
    void this.recheck();
  }

  /**
   * Waits for the deletion of `predecessor`, read at `readRevision`: through this process when
   * the key is ours too (see LocalFollowers), else through a watch.
   */
  private follow(predecessor: IKeyValue, readRevision: bigint): void {
    this.unfollow();
    this.predecessor = predecessor.key;
    if (predecessor.lease !== this.session.leaseId) return this.watch(predecessor, readRevision);
    if (!this.localFollowers.follow(predecessor, this)) void this.recheck();
  }

  /**
   * Watches from "now" rather than from the revision we read at: etcd serves a watch that starts
   * in the past from a catch-up loop that runs every 100 ms, and until it has caught up, a
   * deletion reaches the watch only at the loop's next run (measured: a hand-off of 156 ms when a
   * process's local queue ran faster than the catch-up). When anything was written between our
   * read and the watch's start, one single-key read checks that the predecessor did not go in
   * between.
   */
  private watch(predecessor: IKeyValue, readRevision: bigint): void {
    const watcher = this.client.watch().key(predecessor.key).only('delete').watcher();
    this.watcher = watcher;
    this.armSafetyNet(watcher, predecessor);
    let connections = 0;
    watcher.on('data', () => watcher === this.watcher && this.armSafetyNet(watcher, predecessor));
    watcher.on('delete', () => watcher === this.watcher && void this.recheck());
    watcher.on('connected', (created: { header: { revision: string } }) => {
      if (watcher !== this.watcher) return;
      this.armSafetyNet(watcher, predecessor);
      // After a reconnect the stream may have skipped events sent just before it broke.
      if (++connections > 1) return void this.recheck();
      if (BigInt(created.header.revision) !== readRevision) this.checkPredecessor(watcher, predecessor);
    });
    // The server cancelled the watch: look again, and follow anew.
    watcher.on('error', () => {
      if (watcher !== this.watcher) return;
      this.unfollow();
      void this.recheck();
    });
  }

  /**
   * etcd3's watch streams have no keepalive: a watch carried by a member that stalls (a paused
   * process, a half-open connection) neither errors nor delivers, and its waiter would wait
   * forever after the lock was freed. So a watch that has heard nothing for `safetyNetMs` is
   * backed by a read of the predecessor, served by whichever member answers, and again every
   * `safetyNetMs`. A single-key read, not the recheck: that one reads the whole queue, and a long
   * queue of waiters would pay for it squared.
   */
  private armSafetyNet(watcher: Watcher, predecessor: IKeyValue): void {
    clearTimeout(this.safetyNet);
    this.safetyNet = setTimeout(() => {
      if (watcher !== this.watcher) return;
      this.armSafetyNet(watcher, predecessor);
      this.checkPredecessor(watcher, predecessor);
    }, this.safetyNetMs);
    this.safetyNet.unref();
  }

  /** One single-key read: when the predecessor we watch is gone (or we cannot tell), recheck. */
  private checkPredecessor(watcher: Watcher, predecessor: IKeyValue): void {
    this.txn(keyStillTxn(predecessor)).then(
      (response) => response.succeeded || watcher !== this.watcher || void this.recheck(),
      () => watcher === this.watcher && void this.recheck(),
    );
  }

  private unfollow(): void {
    clearTimeout(this.safetyNet);
    this.watcher?.cancel().catch(() => undefined);
    this.watcher = undefined;
    if (this.predecessor) this.localFollowers.unfollow(this.predecessor, this);
    this.predecessor = undefined;
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
        const response = await this.txn(recheckTxn(this.keys, this.revision!));
        if (this.state !== 'waiting') return;
        if (!response.succeeded) return this.fail(this.sessionLost());
        const before = rangeKvs(response, 0)[0];
        if (!before) return this.grant();
        if (!this.predecessor?.equals(before.key)) this.follow(before, BigInt(response.header.revision));
      } while (this.checkAgain);
    } catch {
      // Could not tell (network): look again shortly; a lost session ends the wait meanwhile.
      if (this.state === 'waiting') setTimeout(() => void this.recheck(), RECHECK_RETRY_MS).unref();
    } finally {
      this.checking = false;
    }
  }

  private grant(): void {
    if (this.state !== 'waiting') return;
    if (!this.session.alive) return this.fail(this.sessionLost());
    this.state = 'granted';
    this.unfollow();
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
