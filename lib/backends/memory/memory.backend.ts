import type { AcquireRequest, EntryMode, LockBackend, LockGrant, LockInspection } from '../lock-backend.interface';
import { GrantWithLoss } from '../../grant-loss';
import { batchToken } from '../../queue/batch';
import { LocalQueueBackend } from '../../queue/local-queue-backend';
import { MemoryBatch } from './memory-batch';
import { MemoryLockStore, type MemoryEntry, type MemoryGrant } from './memory-lock-store';

const DONE: Promise<void> = Promise.resolve();
const HOLDS: Promise<true> = Promise.resolve(true);

/**
 * The embedded default: a real backend with the distributed backends' semantics inside one
 * process. Several clients may share one store, which is how tests model several processes. It
 * drives the store as the other backends drive their servers: one entry per batch of its callers
 * (LocalQueueBackend), put, granted, withdrawn and removed in the caller's own call.
 */
export class MemoryLockBackend extends LocalQueueBackend<MemoryBatch> implements LockBackend {
  readonly name = 'memory';
  readonly maxKeyBytes = 1024;
  readonly modes: readonly EntryMode[] = ['write', 'read', 'permit'];
  /** The store holds an expired holder's key for its lock-delay itself. */
  readonly lockDelay = true;

  constructor(
    private readonly store = new MemoryLockStore(),
    /** The module's holderDescription: kept with each entry (an in-process object, no cost), shown by inspect. */
    private readonly description?: string,
  ) {
    // The store answers at once: an uncontended acquisition waits for no turn of the event loop
    // and makes no AbortSignal; the callers of one tick still share an entry.
    super('memory', { sendFirstAtOnce: true, sendSoon: (send) => process.nextTick(send), signalOnlyWhenWaiting: true });
  }

  /** In process: only closed is unhealthy. */
  async ping(): Promise<void> {
    this.lifecycle.assertOpen();
  }

  /** The store counts entry tokens; a handle shows its entry's as a batch token, turn 0 being the first caller's. */
  async inspect(key: string): Promise<LockInspection> {
    this.lifecycle.assertOpen();
    const view = this.store.inspect(key);
    if (!view.holders) return view;
    const holders = view.holders.map((holder) => ({ ...holder, fencingToken: batchToken(holder.fencingToken, 0n) }));
    return { ...view, holders, holder: holders[0] };
  }

  async forceRelease(key: string): Promise<boolean> {
    this.lifecycle.assertOpen();
    return this.store.forceRelease(key);
  }

  async renew(grant: LockGrant, ttlMs: number): Promise<boolean> {
    const held = this.heldFor(grant);
    return held !== undefined && this.lifecycle.isOpen && this.lease(held.batch, ttlMs, held.batch.holders.size > 1);
  }

  /** Waiting callers are told, and the entries this client holds are revoked: their holders' lost signals fire. */
  async close(): Promise<void> {
    if (!this.lifecycle.beginClose()) return;
    const holding = [...this.queues.batches()].filter((batch) => batch.state === 'holding');
    this.queues.closeAll(this.lifecycle.closedWhileWaiting());
    this.held.clear();
    const heldError = this.lifecycle.closedWhileHeld();
    for (const { key, entry } of holding) if (entry) this.store.revoke(key, entry.owner, heldError);
  }

  /** BatchEntries: puts the batch's entry in the store, with its first caller's ttl; it holds now or when the store calls back. */
  send(batch: MemoryBatch): void {
    const entry = this.entryOf(batch, batch.peek()!.request.ttlMs, true);
    let grant: MemoryGrant | null;
    try {
      grant = this.store.take(batch.key, entry);
    } catch (error) {
      // A second limit for a semaphore in use (LockConfigError): every caller of the batch gets it.
      return this.queues.end(batch, error);
    }
    batch.entry = entry;
    if (grant) this.holds(batch, grant);
    this.queues.sent(batch, grant === null);
  }

  /** BatchEntries: the store skips a cancelled entry when it grants. */
  withdraw(batch: MemoryBatch, reason: unknown): void {
    if (batch.entry) batch.entry.cancelled = true;
    batch.entry = undefined;
    this.queues.end(batch, reason);
  }

  /** BatchEntries: the store grants whoever is next, in this very call. */
  remove(batch: MemoryBatch): Promise<void> {
    if (batch.entry) this.store.release(batch.key, batch.entry.owner);
    batch.entry = batch.held = undefined;
    return DONE;
  }

  /** BatchEntries: the store tells a lost entry at once (lost), so an entry not known lost holds; grant() renews it. */
  confirm(): Promise<true> {
    return HOLDS;
  }

  /** BatchEntries: a lost entry's batch is put back at once (lost), so a batch that holds can serve. */
  usable(): boolean {
    return true;
  }

  /**
   * BatchEntries: the grant of a caller served under the batch's entry, whose lost signal is the
   * entry's. The lease just set for the entry covers its first caller asked with the entry's ttl;
   * any other caller sets it for its own ttl (see lease()).
   */
  grant(batch: MemoryBatch, { key, owner, ttlMs }: Pick<AcquireRequest, 'key' | 'owner' | 'ttlMs'>): LockGrant {
    if (!batch.fresh || ttlMs !== batch.entry!.ttlMs) this.lease(batch, ttlMs, batch.holders.size > 0);
    batch.fresh = false;
    const grant = new GrantWithLoss(key, owner, batch.token(), batch.held!.loss);
    this.held.set(owner, { grant, batch });
    return grant;
  }

  protected newBatch(name: string, id: string): MemoryBatch {
    return new MemoryBatch(name, id);
  }

  /** The store's take without queueing; a granted entry is a batch of its own, ahead of any queued meanwhile. */
  protected async tryTake(request: Omit<AcquireRequest, 'signal'>): Promise<LockGrant | null> {
    const batch = new MemoryBatch(request.key, request.owner);
    batch.mode = request.mode ?? 'write';
    batch.limit = request.limit;
    batch.lockDelayMs = request.lockDelayMs ?? 0;
    const entry = this.entryOf(batch, request.ttlMs, false);
    const grant = this.store.take(request.key, entry);
    if (!grant) return null;
    batch.entry = entry;
    this.holding(batch, grant);
    this.queues.adopt(batch, grant.fencingToken, request);
    return this.grant(batch, request);
  }

  /** An entry of the batch's kind; only one that `waits` stays queued when it may not go at once. */
  private entryOf(batch: MemoryBatch, ttlMs: number, waits: boolean): MemoryEntry {
    return {
      owner: batch.nextOwner(),
      mode: batch.mode,
      limit: batch.limit ?? 1,
      ttlMs,
      lockDelayMs: batch.lockDelayMs,
      cancelled: false,
      onGrant: waits ? (grant) => this.holds(batch, grant) : undefined,
      onLost: () => this.lost(batch),
      description: this.description,
    };
  }

  /** The store granted the batch's entry: its first caller gets the lock (LocalQueues.holds). */
  private holds(batch: MemoryBatch, grant: MemoryGrant): void {
    this.holding(batch, grant);
    this.queues.holds(batch, grant.fencingToken);
  }

  private holding(batch: MemoryBatch, grant: MemoryGrant): void {
    batch.held = grant;
    batch.leaseEnd = performance.now() + batch.entry!.ttlMs;
    batch.fresh = true;
  }

  /**
   * The entry stopped holding (its lease ended, a forced release, this client closed): every
   * holder of its batch lost the lock, and the callers still waiting put a new entry at the back.
   */
  private lost(batch: MemoryBatch): void {
    for (const owner of batch.holders) this.held.delete(owner);
    batch.entry = batch.held = undefined;
    this.queues.requeue(batch);
  }

  /**
   * Sets the entry's lease to `ttlMs` from now for one holder. While others hold under the same
   * (read) entry it never shortens: it runs to the latest end any holder was given, so a reader
   * renewing with a shorter ttl leaves the others' leases alone.
   */
  private lease(batch: MemoryBatch, ttlMs: number, shared: boolean): boolean {
    if (!batch.entry) return false;
    const now = performance.now();
    const end = shared ? Math.max(now + ttlMs, batch.leaseEnd) : now + ttlMs;
    if (!this.store.renew(batch.key, batch.entry.owner, end - now)) return false;
    batch.leaseEnd = end;
    return true;
  }
}
