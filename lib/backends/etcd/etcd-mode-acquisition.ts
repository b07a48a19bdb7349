import type { Etcd3, IKeyValue, ITxnRequest, ITxnResponse, Watcher } from 'etcd3';
import { LockBackendError, LockConfigError } from '../../errors';
import { conflictingLimit, decide, encodeEntry, type Decision, type EntryValue } from './entry-modes';
import type { LockKeys } from './etcd-keys';
import { markGrantedTxn, modeEnqueueTxn, modeRecheckTxn } from './etcd-mode-requests';
import { createRevision, rangeKvs } from './etcd-requests';
import type { EtcdSession } from './etcd-session';

/** How the acquisition tells its owner how it ended (as EtcdAcquisition's AcquisitionOutcome). */
export interface ModeOutcome {
  granted(revision: bigint): void;
  failed(error: unknown): void;
  /** Once the fate of our put is known: delete our key (fenced on `revision` when known). */
  cleanup(revision: bigint | undefined): void;
}

/** What a try-lock's outcome fails with when its entry would have to wait (its key is then deleted). */
export const NOT_FREE = Symbol('not free');

/** Retry delay for a recheck that failed on the network while the session still lives. */
const RECHECK_RETRY_MS = 200;

/**
 * One read or permit entry waiting in the queue of one name: put our key (value: the mode, see
 * entry-modes), and until the grant rule lets it go, watch only what can change the answer
 * (decide), then read the entries ahead again. As for write entries, a wake-up always rereads
 * with our key's existence checked, so a waiter whose key or session expired gets an error,
 * never the lock.
 */
export class EtcdModeAcquisition {
  private revision?: bigint;
  private watcher?: Watcher;
  private safetyNet?: NodeJS.Timeout;
  /** What the current watch waits on ('any' for the name's deletions), to keep a watch that still fits. */
  private watching?: string;
  private checking = false;
  private checkAgain = false;
  private waited = false;
  private state: 'waiting' | 'granted' | 'failed' = 'waiting';
  private enqueued = false;

  constructor(
    /** The lock name as the caller gave it (errors name it). */
    private readonly name: string,
    private readonly client: Etcd3,
    readonly session: EtcdSession,
    readonly keys: LockKeys,
    private readonly entry: EntryValue & { readonly mode: 'read' | 'permit' },
    private readonly txn: (request: ITxnRequest) => Promise<ITxnResponse>,
    private readonly outcome: ModeOutcome,
    /** watchSafetyNetMs of the session: a silent watch is backed by a reread this often. */
    private readonly safetyNetMs: number,
    /** A try-lock: fails with NOT_FREE rather than wait. */
    private readonly onlyIfFree = false,
  ) {}

  get queued(): boolean {
    return this.revision !== undefined;
  }

  /** One round trip: put our key and read the entries ahead. */
  async start(): Promise<void> {
    let response: ITxnResponse;
    try {
      response = await this.txn(modeEnqueueTxn(this.keys, this.session.leaseId, encodeEntry(this.entry)));
    } catch (error) {
      this.enqueued = true;
      if (this.state === 'failed') return this.outcome.cleanup(undefined);
      return this.fail(error);
    }
    this.enqueued = true;
    const own = response.succeeded ? undefined : rangeKvs(response, 0)[0];
    this.revision = response.succeeded ? BigInt(response.header.revision) : own && createRevision(own);
    if (this.state === 'failed') return this.outcome.cleanup(this.revision);
    if (this.revision === undefined) return this.fail(this.sessionLost());
    if (!response.succeeded) return void this.recheck();
    const ahead = rangeKvs(response, 1).filter((kv) => createRevision(kv) < this.revision!);
    // The permits queued or held when we arrived: a later reread may see a permit that is about to reject itself.
    const other = this.entry.mode === 'permit' ? conflictingLimit(this.entry.limit!, ahead) : undefined;
    if (other !== undefined) return this.fail(limitMismatch(this.name, this.entry.limit!, other));
    this.evaluate(ahead, BigInt(response.header.revision));
  }

  /** Gives up waiting (abort, session lost, backend closed). */
  stop(error: unknown): void {
    this.fail(error);
  }

  private evaluate(ahead: IKeyValue[], readRevision: bigint): void {
    const decision = decide(this.entry.mode, this.entry.limit ?? 0, ahead);
    if (decision.kind === 'grant') return this.grant();
    if (this.onlyIfFree) return this.fail(NOT_FREE);
    this.waited = true;
    this.watch(decision, readRevision);
  }

  /**
   * Watches from "now" (see EtcdAcquisition.watch for why not from the revision read): when
   * anything was written in between, one reread covers it.
   */
  private watch(decision: Exclude<Decision, { kind: 'grant' }>, readRevision: bigint): void {
    const target = decision.kind === 'key' ? decision.key.key.toString('latin1') : 'any';
    if (this.watcher && this.watching === target) return;
    this.unwatch();
    this.watching = target;
    const builder = this.client.watch();
    // etcd's watch filters only exclude: a watch of puts and deletes has none.
    const watcher =
      decision.kind === 'any-delete'
        ? builder.prefix(this.keys.start).only('delete').withPreviousKV().watcher()
        : decision.orMarked
          ? builder.key(decision.key.key).watcher()
          : builder.key(decision.key.key).only('delete').watcher();
    this.watcher = watcher;
    this.armSafetyNet(watcher);
    let connections = 0;
    const wake = () => watcher === this.watcher && void this.recheck();
    watcher.on('data', () => watcher === this.watcher && this.armSafetyNet(watcher));
    if (decision.kind === 'key') {
      watcher.on('delete', wake);
      watcher.on('put', wake);
    } else {
      // Deletions behind us cannot free a place ahead: only those of older entries wake us.
      watcher.on('delete', (_kv, previous) => (!previous || createRevision(previous) < this.revision!) && wake());
    }
    watcher.on('connected', (created: { header: { revision: string } }) => {
      if (watcher !== this.watcher) return;
      this.armSafetyNet(watcher);
      if (++connections > 1 || BigInt(created.header.revision) !== readRevision) wake();
    });
    watcher.on('error', () => {
      if (watcher !== this.watcher) return;
      this.unwatch();
      void this.recheck();
    });
  }

  /** etcd3's watch streams have no keepalive (see EtcdAcquisition.armSafetyNet): a silent watch is backed by a reread. */
  private armSafetyNet(watcher: Watcher): void {
    clearTimeout(this.safetyNet);
    this.safetyNet = setTimeout(() => {
      if (watcher !== this.watcher) return;
      this.armSafetyNet(watcher);
      void this.recheck();
    }, this.safetyNetMs);
    this.safetyNet.unref();
  }

  private unwatch(): void {
    clearTimeout(this.safetyNet);
    this.watcher?.cancel().catch(() => undefined);
    this.watcher = undefined;
    this.watching = undefined;
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
        const response = await this.txn(modeRecheckTxn(this.keys, this.revision!));
        if (this.state !== 'waiting') return;
        if (!response.succeeded) return this.fail(this.sessionLost());
        this.evaluate(rangeKvs(response, 0), BigInt(response.header.revision));
      } while (this.checkAgain);
    } catch {
      if (this.state === 'waiting') setTimeout(() => void this.recheck(), RECHECK_RETRY_MS).unref();
    } finally {
      this.checking = false;
    }
  }

  private grant(): void {
    if (this.state !== 'waiting') return;
    if (!this.session.alive) return this.fail(this.sessionLost());
    this.state = 'granted';
    this.unwatch();
    // Best effort: a permit behind that misses it rereads at its safety net.
    if (this.waited && this.entry.mode === 'permit') {
      const marked = encodeEntry({ ...this.entry, granted: true });
      this.txn(markGrantedTxn(this.keys, this.revision!, this.session.leaseId, marked)).catch(() => undefined);
    }
    this.outcome.granted(this.revision!);
  }

  private fail(error: unknown): void {
    if (this.state !== 'waiting') return;
    this.state = 'failed';
    this.unwatch();
    this.outcome.failed(error);
    if (this.enqueued) this.outcome.cleanup(this.revision);
  }

  private sessionLost(): Error {
    return new LockBackendError('etcd', 'keep its place in the queue', this.session.reason ?? new Error('the lock key was deleted: its session lease expired'));
  }
}

/** A permit asked with another limit than the permits already queued or holding under the name. */
export function limitMismatch(name: string, limit: number, other: number): LockConfigError {
  return new LockConfigError('limit', `the semaphore "${name}" has limit ${other} at etcd (a permit queued or held with it), not ${limit} as asked`);
}
