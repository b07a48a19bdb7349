import type { LockInspection } from '../lock-backend.interface';

/**
 * The "server" of the in-memory backend: lock state shared by every MemoryLockBackend client
 * created over it. Same semantics as the distributed backends: FIFO queue with direct handoff
 * (the next waiter owns the lock before it is woken), leases that expire, fencing tokens that
 * never go back.
 */
export interface MemoryWaiter {
  readonly owner: string;
  readonly ttlMs: number;
  /** Set when the waiter gave up; skipped at handoff instead of searched for and spliced out. */
  cancelled: boolean;
  /** Called synchronously at handoff, when the waiter already owns the lock. */
  readonly onGrant: (grant: MemoryGrant) => void;
}

export interface MemoryGrant {
  readonly key: string;
  readonly owner: string;
  readonly fencingToken: bigint;
  readonly lost: AbortSignal;
}

interface Holder {
  readonly grant: MemoryGrant;
  readonly lost: AbortController;
  expiry: NodeJS.Timeout;
  /** performance.now() of the grant, and of the lease's end as last set: what inspect reports. */
  readonly grantedAt: number;
  expiresAt: number;
}

interface KeyState {
  holder: Holder;
  readonly queue: MemoryWaiter[];
  /** Index of the queue's head: shifting a long array per handoff would be O(waiters). */
  head: number;
}

export class MemoryLockStore {
  private readonly states = new Map<string, KeyState>();
  /**
   * One counter for every key: tokens then grow over the grants of each key, as they must, and
   * nothing is kept per key once it is free (a map of counters per name would grow with every
   * name ever locked, e.g. `order:<id>`).
   */
  private lastFence = 0n;

  /** Grant at once if free; otherwise `null`, or enqueue `waiter` when given. */
  take(key: string, owner: string, ttlMs: number, waiter?: MemoryWaiter): MemoryGrant | null {
    const state = this.states.get(key);
    if (!state) {
      const holder = this.grant(key, owner, ttlMs);
      this.states.set(key, { holder, queue: [], head: 0 });
      return holder.grant;
    }
    if (waiter) state.queue.push(waiter);
    return null;
  }

  renew(key: string, owner: string, ttlMs: number): boolean {
    const holder = this.states.get(key)?.holder;
    if (holder?.grant.owner !== owner) return false;
    clearTimeout(holder.expiry);
    holder.expiry = this.expireAfter(key, owner, ttlMs);
    holder.expiresAt = performance.now() + ttlMs;
    return true;
  }

  /** Owner-checked: a release by anyone but the current holder changes nothing. */
  release(key: string, owner: string): boolean {
    const state = this.states.get(key);
    if (state?.holder.grant.owner !== owner) return false;
    clearTimeout(state.holder.expiry);
    this.handOff(key, state);
    return true;
  }

  /** Owner-checked like release, and the holder's lost signal fires with `reason` (its client closed). */
  revoke(key: string, owner: string, reason: Error): void {
    const state = this.states.get(key);
    if (state?.holder.grant.owner !== owner) return;
    state.holder.lost.abort(reason);
    this.release(key, owner);
  }

  /** The holder and the waiters that have not given up (every caller: this backend has no batches). */
  inspect(key: string): LockInspection {
    const state = this.states.get(key);
    if (!state) return { held: false, waiting: 0 };
    const { grant, grantedAt, expiresAt } = state.holder;
    const now = performance.now();
    let waiting = 0;
    for (let i = state.head; i < state.queue.length; i++) if (!state.queue[i].cancelled) waiting++;
    return { held: true, holder: { owner: grant.owner, fencingToken: grant.fencingToken, heldForMs: now - grantedAt, expiresInMs: Math.max(0, expiresAt - now) }, waiting };
  }

  /**
   * Whoever holds `key` stops holding it and the next waiter is granted; the holder is not told
   * (as with a server, it learns at its next renewal). False when the key was free.
   */
  forceRelease(key: string): boolean {
    const state = this.states.get(key);
    if (!state) return false;
    clearTimeout(state.holder.expiry);
    this.handOff(key, state);
    return true;
  }

  /** Hands the lock to the next waiter that has not given up, or frees the key. */
  private handOff(key: string, state: KeyState): void {
    while (state.head < state.queue.length) {
      const next = state.queue[state.head];
      state.queue[state.head++] = undefined as unknown as MemoryWaiter;
      if (next.cancelled) continue;
      state.holder = this.grant(key, next.owner, next.ttlMs);
      this.compact(state);
      next.onGrant(state.holder.grant);
      return;
    }
    this.states.delete(key);
  }

  private compact(state: KeyState): void {
    if (state.head > 1024 && state.head * 2 > state.queue.length) {
      state.queue.splice(0, state.head);
      state.head = 0;
    }
  }

  private grant(key: string, owner: string, ttlMs: number): Holder {
    const fencingToken = ++this.lastFence;
    const lost = new AbortController();
    const grantedAt = performance.now();
    return {
      grant: { key, owner, fencingToken, lost: lost.signal },
      lost,
      expiry: this.expireAfter(key, owner, ttlMs),
      grantedAt,
      expiresAt: grantedAt + ttlMs,
    };
  }

  private expireAfter(key: string, owner: string, ttlMs: number): NodeJS.Timeout {
    const timer = setTimeout(() => {
      const state = this.states.get(key);
      if (state?.holder.grant.owner !== owner) return;
      state.holder.lost.abort(new Error(`lease of "${key}" expired after ${ttlMs} ms`));
      this.handOff(key, state);
    }, ttlMs);
    timer.unref();
    return timer;
  }
}
