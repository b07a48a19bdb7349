import { LockConfigError } from '../../errors';
import { batchToken } from '../../queue/batch';
import type { AcquireRequest, EntryMode, LockGrant } from '../lock-backend.interface';
import { PendingWait } from '../../queue/pending-wait';
import { isStoppable } from '../built-in-backend';
import type { ServerClock } from '../server-clock';
import { LATE_GRANT_SHARE } from './postgres-batch';
import type { PostgresCalls } from './postgres-calls';
import type { PostgresListener } from './postgres-listener';
import type { SharedAcquireRow, SharedStatements } from './postgres-modes-statements';
import { PostgresSafetyNet, type WaitingEntry } from './postgres-safety-net';
import type { CheckRow } from './postgres-statements';

type SharedMode = Exclude<EntryMode, 'write'>;

/** A read or permit grant: its own class, so that the backend routes renew and release by it without a lookup. */
export class SharedGrant implements LockGrant {
  constructor(
    readonly key: string,
    readonly owner: string,
    readonly fencingToken: bigint,
    readonly lost: AbortSignal,
    readonly requestedAt: number,
  ) {}
}

/** One caller's read or permit entry at the server: never shared with another caller. */
class SharedEntry implements WaitingEntry {
  state: 'sending' | 'queued' | 'holding' | 'ended' = 'sending';
  askedAt = 0;
  refreshedAt = 0;
  holderEndsAt = Infinity;
  /** A grant notified before the queuing statement's answer arrived. */
  earlyGrant?: { fence: bigint; serverMs: number };
  /** A late grant is being confirmed (renewed) before its caller gets it. */
  confirming = false;
  fence?: bigint;
  grant?: SharedGrant;

  constructor(
    readonly key: string,
    /** The entry's owner at the server: unique across processes. */
    readonly entry: string,
    readonly owner: string,
    readonly mode: SharedMode,
    readonly limit: number | null,
    readonly ttlMs: number,
    readonly wait?: PendingWait<LockGrant>,
  ) {}

  get aliveMs(): number {
    return Math.min(Math.max(this.ttlMs, 500), 60_000);
  }
}

/**
 * Read and permit entries: one server entry per caller (readers of one process must not wait
 * for each other, and each permit is a permit), granted by the modes' functions in the name's one
 * queue with its write entries. A waiter is woken by the NOTIFY of the statement that granted
 * it, and its safety net re-checks at the end of the lease that can next let it go.
 */
export class PostgresSharedEntries {
  /** Entries being queued or waiting, by entry: where a notified grant goes. */
  private readonly entries = new Map<string, SharedEntry>();
  /** Held entries, by their caller's owner id: what renew and release act on. */
  private readonly held = new Map<string, SharedEntry>();
  private readonly safetyNet: PostgresSafetyNet<SharedEntry>;
  private seq = 0;

  constructor(
    private readonly sql: SharedStatements,
    private readonly calls: PostgresCalls,
    private readonly clock: ServerClock,
    private readonly listener: PostgresListener,
    private readonly clientId: string,
    /** Every grant's lost signal: aborted when the backend closes. */
    private readonly lost: AbortSignal,
  ) {
    this.safetyNet = new PostgresSafetyNet<SharedEntry>(
      (entries) =>
        this.calls.query<CheckRow>('check the queue', this.sql.check, [
          entries.map((entry) => entry.key),
          entries.map((entry) => entry.entry),
          entries.map((entry) => entry.mode),
          entries.map((entry) => entry.limit),
          entries.map((entry) => entry.ttlMs),
          entries.map((entry) => entry.aliveMs),
          this.listener.channel,
        ]),
      clock,
      () => this.waiting(),
      {
        granted: (entry, fence, leaseEndsAfter) => this.granted(entry, fence, leaseEndsAfter - entry.ttlMs),
        left: (entry) => void this.letGo(entry),
      },
    );
  }

  acquire(request: AcquireRequest): Promise<LockGrant> {
    let entry: SharedEntry;
    const wait = new PendingWait<LockGrant>();
    try {
      entry = this.newEntry(request, wait);
    } catch (error) {
      return Promise.reject(error);
    }
    const leave = () => this.leave(entry);
    if (isStoppable(request)) wait.watch(request, leave);
    else wait.listen(request.signal, leave);
    if (wait.isSettled) return wait.promise;
    this.entries.set(entry.entry, entry);
    this.send(entry);
    return wait.promise;
  }

  /** One statement that grants the entry if it may go now, and never queues it. */
  async tryAcquire(request: Omit<AcquireRequest, 'signal'>): Promise<LockGrant | null> {
    const entry = this.newEntry(request);
    const sentAt = performance.now();
    let row: SharedAcquireRow;
    try {
      row = await this.calls.queryOne<SharedAcquireRow>('take a lock', this.sql.acquire, this.acquireValues(entry, false));
    } catch (error) {
      // It may still have run (an answer that came too late): take back what it took.
      void this.letGo(entry);
      throw error;
    }
    this.clock.sample(row.server_ms, sentAt);
    if (row.other_limit !== null) throw this.limitError(entry, row.other_limit);
    if (row.granted_fence === null) return null;
    return this.holding(entry, BigInt(row.granted_fence), sentAt + row.left_ms - entry.ttlMs);
  }

  async renew(grant: SharedGrant, ttlMs: number): Promise<boolean> {
    const entry = this.held.get(grant.owner);
    if (entry?.grant !== grant) return false;
    if (await this.renewEntry(entry, Math.ceil(ttlMs), 'renew a lock')) return true;
    this.held.delete(grant.owner);
    return false;
  }

  release(grant: SharedGrant): Promise<void> {
    const entry = this.held.get(grant.owner);
    if (entry?.grant !== grant) return Promise.resolve();
    this.held.delete(grant.owner);
    entry.state = 'ended';
    return this.calls.query('release a lock', this.sql.release, [entry.key, entry.entry]).then(() => undefined);
  }

  /** A notified grant (`<entry> <fence> <server ms>`), when the entry is one of these; false otherwise. */
  notified(entryId: string, fence: string, serverMs: string): boolean {
    const entry = this.entries.get(entryId);
    if (!entry) return false;
    if (!/^\d+$/.test(fence)) return true;
    if (entry.state === 'sending') entry.earlyGrant = { fence: BigInt(fence), serverMs: Number(serverMs) };
    else if (entry.state === 'queued') this.granted(entry, BigInt(fence), Math.max(entry.askedAt, this.clock.earliestLocal(Number(serverMs))));
    return true;
  }

  /** LISTEN is in place again: grants notified meanwhile were lost. */
  resumed(): void {
    this.safetyNet.checkNow();
  }

  /** Ends every wait with `reason` and lets go of every entry, held or queued: the releases' promise. */
  close(reason: unknown): Promise<unknown> {
    this.safetyNet.stop();
    const entries = [...this.entries.values(), ...this.held.values()];
    this.entries.clear();
    this.held.clear();
    for (const entry of entries) {
      entry.state = 'ended';
      entry.wait?.reject(reason);
    }
    return Promise.all(entries.map((entry) => this.letGo(entry)));
  }

  private newEntry(request: Omit<AcquireRequest, 'signal'>, wait?: PendingWait<LockGrant>): SharedEntry {
    const mode = request.mode as SharedMode;
    let limit: number | null = null;
    if (mode === 'permit') {
      limit = request.limit ?? NaN;
      if (!Number.isInteger(limit) || limit < 1 || limit > 2 ** 31 - 1) {
        throw new LockConfigError('limit', `a semaphore's limit must be a positive integer, got ${String(request.limit)} for "${request.key}".`);
      }
    }
    return new SharedEntry(request.key, `${this.clientId}~s${(this.seq++).toString(36)}`, request.owner, mode, limit, Math.ceil(request.ttlMs), wait);
  }

  private acquireValues(entry: SharedEntry, queue: boolean): unknown[] {
    return [entry.key, entry.entry, this.listener.channel, entry.mode, entry.limit, entry.ttlMs, entry.aliveMs, queue];
  }

  /** Puts the entry at the server: granted at once, or queued at the tail. Also the way back into the queue for a late grant that ran out. */
  private send(entry: SharedEntry): void {
    const sentAt = performance.now();
    entry.state = 'sending';
    entry.askedAt = sentAt;
    entry.refreshedAt = sentAt;
    const listening = this.listener.generation;
    this.calls.queryOne<SharedAcquireRow>('queue for a lock', this.sql.acquire, this.acquireValues(entry, true)).then(
      (row) => {
        this.clock.sample(row.server_ms, sentAt);
        if (row.other_limit !== null) return this.end(entry, this.limitError(entry, row.other_limit));
        // The caller left while the statement was on its way: leave the queue (or the holders).
        if (entry.state === 'ended') return void this.letGo(entry);
        if (row.granted_fence !== null) return this.granted(entry, BigInt(row.granted_fence), sentAt + row.left_ms - entry.ttlMs);
        entry.state = 'queued';
        entry.holderEndsAt = performance.now() + row.left_ms;
        const early = entry.earlyGrant;
        entry.earlyGrant = undefined;
        if (early) this.granted(entry, early.fence, Math.max(entry.askedAt, this.clock.earliestLocal(early.serverMs)));
        // Queued under another LISTEN than the one in place now: a grant notified in between was lost.
        else if (this.listener.generation !== undefined && listening !== this.listener.generation) this.safetyNet.checkNow();
        else this.safetyNet.schedule();
      },
      (error: unknown) => {
        this.end(entry, error);
        void this.letGo(entry);
      },
    );
  }

  /**
   * The entry holds, with a lease that began no earlier than `requestedAt`. A grant so late that
   * little of its lease is left is confirmed first; one that ran out meanwhile queues again.
   */
  private granted(entry: SharedEntry, fence: bigint, requestedAt: number): void {
    if (entry.state === 'ended' || entry.state === 'holding' || entry.confirming) return;
    if (requestedAt + entry.ttlMs - performance.now() >= entry.ttlMs * LATE_GRANT_SHARE) return this.handOut(entry, fence, requestedAt);
    entry.confirming = true;
    entry.fence = fence;
    const sentAt = performance.now();
    this.renewEntry(entry, entry.ttlMs, 'confirm a late grant of a lock').then(
      (renewed) => {
        entry.confirming = false;
        if (entry.state === 'ended') return void this.letGo(entry);
        if (!renewed) return this.send(entry);
        this.handOut(entry, fence, sentAt);
      },
      (error: unknown) => {
        entry.confirming = false;
        this.end(entry, error);
        void this.letGo(entry);
      },
    );
  }

  /** Gives the waiting caller its grant; one that left meanwhile lets the entry go. */
  private handOut(entry: SharedEntry, fence: bigint, requestedAt: number): void {
    this.entries.delete(entry.entry);
    const grant = this.holding(entry, fence, requestedAt);
    if (!entry.wait!.resolve(grant)) {
      this.held.delete(entry.owner);
      entry.state = 'ended';
      void this.letGo(entry);
    }
  }

  private holding(entry: SharedEntry, fence: bigint, requestedAt: number): SharedGrant {
    entry.state = 'holding';
    entry.fence = fence;
    entry.grant = new SharedGrant(entry.key, entry.owner, batchToken(fence, 0n), this.lost, Math.min(requestedAt, performance.now()));
    this.held.set(entry.owner, entry);
    return entry.grant;
  }

  /** The entry's holder row, owner- and fence-checked, extended to `ttlMs` from now; false when it is not ours. */
  private async renewEntry(entry: SharedEntry, ttlMs: number, operation: string): Promise<boolean> {
    const sentAt = performance.now();
    const [row] = await this.calls.query<{ server_ms: number | null }>(operation, this.sql.renew, [entry.key, entry.entry, ttlMs, entry.fence!.toString()]);
    if (row?.server_ms === null || row?.server_ms === undefined) return false;
    this.clock.sample(row.server_ms, sentAt);
    return true;
  }

  /** The caller stopped waiting (its wait already ended): the entry leaves once its statement, if on its way, is answered. */
  private leave(entry: SharedEntry): void {
    const state = entry.state;
    entry.state = 'ended';
    this.entries.delete(entry.entry);
    if (state === 'queued' && !entry.confirming) void this.letGo(entry);
  }

  private end(entry: SharedEntry, reason: unknown): void {
    entry.state = 'ended';
    this.entries.delete(entry.entry);
    entry.wait?.reject(reason);
  }

  /** Leaves the queue or the holders, owner-checked: best effort, the lease or the entry's liveness ends it otherwise. */
  private letGo(entry: SharedEntry): Promise<void> {
    this.entries.delete(entry.entry);
    return this.calls.query('release a lock', this.sql.release, [entry.key, entry.entry]).then(
      () => undefined,
      () => undefined,
    );
  }

  private limitError(entry: SharedEntry, otherLimit: number): LockConfigError {
    return new LockConfigError(
      'limit',
      `the semaphore "${entry.key}" is held or awaited with limit ${otherLimit}, and this permit asks for limit ${entry.limit}: every permit of a key must use one limit.`,
    );
  }

  /** The entries waiting at the server, for the safety net. */
  private *waiting(): Iterable<SharedEntry> {
    for (const entry of this.entries.values()) if (entry.state === 'queued' && !entry.confirming) yield entry;
  }
}
