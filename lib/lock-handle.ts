import { DistributedLockError } from './errors';
import type { LockLease } from './lock-lease';

/**
 * A held lock, as the caller sees it. Each `acquire` returns its own handle; a re-entrant one
 * shares the lease of the outer one, and only the outermost release reaches the backend.
 */
export class LockHandle {
  private releasing?: Promise<void>;

  /** @internal The lease this handle holds (shared with the handles that re-entered it). */
  readonly lease: LockLease;
  /** True when this handle re-entered a lock the async call chain already held. */
  readonly reentrant: boolean;

  /** @internal */
  constructor(lease: LockLease, reentrant: boolean) {
    this.lease = lease;
    this.reentrant = reentrant;
  }

  /** The lock name as given (before the module's keyPrefix). */
  get key(): string {
    return this.lease.name;
  }

  /**
   * Strictly greater than the token of every earlier grant of this key. Send it with every write
   * the lock protects, and have the storage refuse a token lower than one it has accepted.
   */
  get fencingToken(): bigint {
    return this.lease.grant.fencingToken;
  }

  /** Aborted, with a LockLostError as its reason, the moment the lock is known lost. */
  get signal(): AbortSignal {
    return this.lease.signal;
  }

  /** True while the lock is held and not known lost. */
  get isHeld(): boolean {
    return this.releasing === undefined && this.lease.isActive;
  }

  /** Owner-checked and idempotent; never rejects (a lost lease is reported through `signal`). */
  release(): Promise<void> {
    this.releasing ??= this.lease.exit();
    return this.releasing;
  }

  /**
   * Renews the lease now, to `ttlMs` from now (default: the current ttl), and keeps that ttl for
   * later renewals. Rejects with LockLostError when the lease is no longer ours.
   */
  extend(ttlMs?: number): Promise<void> {
    if (this.releasing) return Promise.reject(new DistributedLockError(`Lock "${this.key}" was released; acquire it again.`));
    return this.lease.extend(ttlMs);
  }
}
