import { deadlines, type Deadline } from '../../deadlines';
import { LockConfigError } from '../../errors';
import { LazyAbort } from '../../lazy-abort';
import type { EntryMode, LockHolder, LockInspection } from '../lock-backend.interface';
import { mayGo } from '../entry-rule';

/**
 * The "server" of the in-memory backend: lock state shared by every MemoryLockBackend client
 * created over it. Same semantics as the distributed backends: each name is one FIFO queue of
 * entries (write, read, permit) granted by the entry rule, the next entries own the lock before
 * they are woken, leases expire, fencing tokens never go back. A client puts one entry per batch
 * of its callers, as a process does at a server.
 */
export interface MemoryEntry {
  readonly owner: string;
  readonly mode: EntryMode;
  /** For a permit: the semaphore's limit. */
  readonly limit: number;
  readonly ttlMs: number;
  /** Lock-delay: when this entry's lease runs out unreleased, the key is granted to nobody for this long. */
  readonly lockDelayMs?: number;
  /** Set when the waiter gave up; skipped at the next grant instead of searched for and spliced out. */
  cancelled: boolean;
  /** Called synchronously when the entry is granted after waiting. */
  readonly onGrant?: (grant: MemoryGrant) => void;
  /**
   * Called when a granted entry stops holding without its owner releasing it (its lease ended, a
   * forced release, its client closed), before its lost signal fires: the client forgets it first.
   */
  readonly onLost?: () => void;
  /** The putting client's holderDescription, shown by inspect (clients sharing a store model processes). */
  readonly description?: string;
}

export interface MemoryGrant {
  readonly key: string;
  readonly owner: string;
  readonly fencingToken: bigint;
  /** Lost without a release (lease ended, forced release, client closed): shared by the grants served under the entry. */
  readonly loss: LazyAbort;
}

interface Held {
  readonly grant: MemoryGrant;
  /** On the process's deadline scheduler: a lease set and cancelled within one cycle costs no Node timer. */
  expiry: Deadline;
  /** performance.now() of the grant, and of the lease's end as last set: what inspect reports. */
  readonly grantedAt: number;
  expiresAt: number;
}

interface QueuedEntry {
  readonly entry: MemoryEntry;
  held?: Held;
}

interface KeyState {
  /** Holders first (granted entries always form a prefix: nobody overtakes a waiting entry), then waiters. */
  readonly queue: QueuedEntry[];
  /** A holder's lease ran out with a lock-delay: nothing is granted before this performance.now() time. */
  delayedUntil?: number;
  delayTimer?: NodeJS.Timeout;
}

export class MemoryLockStore {
  private readonly states = new Map<string, KeyState>();
  /**
   * One counter for every key: tokens then grow over the grants of each key, as they must, and
   * nothing is kept per key once it is free (a map of counters per name would grow with every
   * name ever locked, e.g. `order:<id>`).
   */
  private lastFence = 0n;

  /**
   * Puts `entry` in the key's queue: its grant when it may go at once; otherwise `null`, and the
   * entry stays queued only when it can wait (it has onGrant).
   */
  take(key: string, entry: MemoryEntry): MemoryGrant | null {
    let state = this.states.get(key);
    if (!state) {
      state = { queue: [] };
      this.states.set(key, state);
    }
    if (entry.mode === 'permit') assertSameLimit(key, state, entry.limit);
    if (this.mayGoNow(state, entry)) {
      const queued: QueuedEntry = { entry };
      queued.held = this.grant(key, queued);
      state.queue.splice(this.heldCount(state), 0, queued);
      return queued.held.grant;
    }
    if (entry.onGrant) state.queue.push({ entry });
    else if (state.queue.length === 0 && !state.delayTimer) this.states.delete(key);
    return null;
  }

  renew(key: string, owner: string, ttlMs: number): boolean {
    const held = this.find(key, owner)?.held;
    if (!held) return false;
    const now = performance.now();
    deadlines.cancel(held.expiry);
    held.expiry = this.expireAfter(key, owner, ttlMs, now);
    held.expiresAt = now + ttlMs;
    return true;
  }

  /** Owner-checked: a release by anyone but a current holder changes nothing. */
  release(key: string, owner: string): boolean {
    const state = this.states.get(key);
    const index = state ? state.queue.findIndex((queued) => queued.held?.grant.owner === owner) : -1;
    if (!state || index === -1) return false;
    deadlines.cancel(state.queue[index].held!.expiry);
    state.queue.splice(index, 1);
    this.grantNext(key, state);
    return true;
  }

  /** Owner-checked like release, and the holder is told it lost the lock with `reason` (its client closed). */
  revoke(key: string, owner: string, reason: Error): void {
    const state = this.states.get(key);
    const index = state ? state.queue.findIndex((queued) => queued.held?.grant.owner === owner) : -1;
    if (!state || index === -1) return;
    const removed = state.queue.splice(index, 1);
    this.lose(removed, reason);
    this.grantNext(key, state);
  }

  /** The lease ran out unreleased: the holder loses the lock, and its lock-delay (if any) holds the key before anyone is granted. */
  private expire(key: string, owner: string, ttlMs: number): void {
    const state = this.states.get(key);
    const index = state ? state.queue.findIndex((queued) => queued.held?.grant.owner === owner) : -1;
    if (!state || index === -1) return;
    const delayMs = state.queue[index].entry.lockDelayMs ?? 0;
    if (delayMs > 0) this.delay(key, state, delayMs);
    this.lose(state.queue.splice(index, 1), new Error(`lease of "${key}" expired after ${ttlMs} ms`));
    this.grantNext(key, state);
  }

  /** Nothing of `key` is granted for `delayMs` from now (or until a later delay already set ends). */
  private delay(key: string, state: KeyState, delayMs: number): void {
    const until = performance.now() + delayMs;
    if (state.delayedUntil !== undefined && state.delayedUntil >= until) return;
    state.delayedUntil = until;
    clearTimeout(state.delayTimer);
    state.delayTimer = setTimeout(() => {
      state.delayedUntil = state.delayTimer = undefined;
      if (this.states.get(key) === state) this.grantNext(key, state);
    }, delayMs);
    state.delayTimer.unref();
  }

  /** The holders and the entries still waiting (one per batch of a client's callers). */
  inspect(key: string): LockInspection {
    const state = this.states.get(key);
    const first = state?.queue[0];
    if (!state || !first?.held) return { held: false, waiting: state ? this.waiting(state) : 0 };
    const now = performance.now();
    const holders: LockHolder[] = [];
    for (const { held, entry } of state.queue) {
      if (!held) break;
      holders.push({
        owner: held.grant.owner,
        fencingToken: held.grant.fencingToken,
        heldForMs: now - held.grantedAt,
        expiresInMs: Math.max(0, held.expiresAt - now),
        ...(entry.description !== undefined ? { description: entry.description } : {}),
      });
    }
    const { mode, limit } = first.entry;
    return { held: true, mode, ...(mode === 'permit' ? { limit } : {}), holder: holders[0], holders, waiting: this.waiting(state) };
  }

  /**
   * Every holder of `key` stops holding it and the next waiters are granted. The holders' lost
   * signals fire at once: a server's clients learn at their next renewal, this one's are in
   * process. False when the key was free.
   */
  forceRelease(key: string): boolean {
    const state = this.states.get(key);
    const count = state ? this.heldCount(state) : 0;
    if (!state || count === 0) return false;
    this.lose(state.queue.splice(0, count), new Error(`"${key}" was force-released`));
    this.grantNext(key, state);
    return true;
  }

  /** Holders taken out of their queue lose the lock: their clients forget them, then their lost signals fire. */
  private lose(removed: QueuedEntry[], reason: Error): void {
    for (const { held } of removed) deadlines.cancel(held!.expiry);
    for (const { entry } of removed) entry.onLost?.();
    for (const { held } of removed) held!.grant.loss.abort(reason);
  }

  /**
   * Grants, in order, every waiting entry the rule lets go, then tells them: a client told may
   * release or put entries at once, so the queue is left whole first. Frees the key when nothing is left.
   */
  private grantNext(key: string, state: KeyState): void {
    const { queue } = state;
    if (state.delayTimer) return;
    let ahead = 0;
    let writesAhead = 0;
    let granted: QueuedEntry[] | undefined;
    for (let i = 0; i < queue.length; i++) {
      const queued = queue[i];
      if (!queued.held && queued.entry.cancelled) {
        queue.splice(i--, 1);
        continue;
      }
      if (!queued.held) {
        if (!mayGo(queued.entry.mode, queued.entry.limit, ahead, writesAhead)) break;
        queued.held = this.grant(key, queued);
        (granted ??= []).push(queued);
      }
      ahead++;
      if (queued.entry.mode === 'write') writesAhead++;
    }
    if (queue.length === 0) this.states.delete(key);
    if (granted) for (const { entry, held } of granted) entry.onGrant!(held!.grant);
  }

  /** A new entry may go at once only when nobody waits (FIFO) and the rule lets it pass the holders. */
  private mayGoNow(state: KeyState, entry: MemoryEntry): boolean {
    if (state.delayTimer) return false;
    let writesAhead = 0;
    let ahead = 0;
    for (const queued of state.queue) {
      if (!queued.held) {
        if (!queued.entry.cancelled) return false;
        continue;
      }
      ahead++;
      if (queued.entry.mode === 'write') writesAhead++;
    }
    return mayGo(entry.mode, entry.limit, ahead, writesAhead);
  }

  private heldCount(state: KeyState): number {
    let count = 0;
    while (count < state.queue.length && state.queue[count].held) count++;
    return count;
  }

  private waiting(state: KeyState): number {
    let waiting = 0;
    for (const queued of state.queue) if (!queued.held && !queued.entry.cancelled) waiting++;
    return waiting;
  }

  private find(key: string, owner: string): QueuedEntry | undefined {
    return this.states.get(key)?.queue.find((queued) => queued.held?.grant.owner === owner);
  }

  private grant(key: string, queued: QueuedEntry): Held {
    const { owner, ttlMs } = queued.entry;
    const grantedAt = performance.now();
    return {
      grant: { key, owner, fencingToken: ++this.lastFence, loss: new LazyAbort() },
      expiry: this.expireAfter(key, owner, ttlMs, grantedAt),
      grantedAt,
      expiresAt: grantedAt + ttlMs,
    };
  }

  private expireAfter(key: string, owner: string, ttlMs: number, now: number): Deadline {
    return deadlines.add(now + ttlMs, () => this.expire(key, owner, ttlMs));
  }
}

/** A semaphore's limit is the same for every permit queued or held at once. */
function assertSameLimit(key: string, state: KeyState, limit: number): void {
  for (const { entry, held } of state.queue) {
    if (entry.mode === 'permit' && (held || !entry.cancelled) && entry.limit !== limit) {
      throw new LockConfigError('limit', `semaphore "${key}" is in use with limit ${entry.limit}; this call asked for limit ${limit}. Use one limit per name.`);
    }
  }
}
