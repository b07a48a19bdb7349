import { DistributedLockError, type LockLostError } from './errors';
import type { LockLease } from './lock-lease';

/**
 * A held lock, as the caller sees it. Each `acquire` returns its own handle; a re-entrant one
 * shares the lease of the outer one, and only the outermost release reaches the backend. A
 * handle of several names (`acquire(['a', 'b'])`) holds one handle per name.
 */
export class LockHandle {
  private releasing?: Promise<void>;
  private anyLost?: AbortSignal;

  /** @internal The lease this handle holds (shared with the handles that re-entered it); the first name's for several. */
  readonly lease: LockLease;
  /** True when this handle re-entered a lock the async call chain already held (every name, for several). */
  readonly reentrant: boolean;
  /** @internal One handle per name, in the order they were taken (sorted backend keys), for a handle of several names. */
  readonly parts?: readonly LockHandle[];

  /** @internal */
  constructor(lease: LockLease, reentrant: boolean, parts?: readonly LockHandle[]) {
    this.lease = lease;
    this.reentrant = reentrant;
    this.parts = parts;
  }

  /** @internal A handle of several names, taken in this order. */
  static of(parts: readonly LockHandle[]): LockHandle {
    return new LockHandle(parts[0].lease, parts.every((part) => part.reentrant), parts);
  }

  /** The lock name as given (before the module's keyPrefix); the first of `names` for several. */
  get name(): string {
    return this.lease.name;
  }

  /** @deprecated The same as `name` (a key is what the backend sees: keyPrefix + name). */
  get key(): string {
    return this.lease.name;
  }

  /** Every name this handle holds, in the order they were taken. */
  get names(): readonly string[] {
    return this.parts ? this.parts.map((part) => part.name) : [this.name];
  }

  /**
   * Strictly greater than the token of every earlier grant of this key. Send it with every write
   * the lock protects, and have the storage refuse a token lower than one it has accepted. For a
   * handle of several names, the first name's: see `fencingTokens`.
   */
  get fencingToken(): bigint {
    return this.lease.grant.fencingToken;
  }

  /** Each name's fencing token. */
  get fencingTokens(): ReadonlyMap<string, bigint> {
    return new Map((this.parts ?? [this]).map((part) => [part.name, part.fencingToken]));
  }

  /** Aborted, with a LockLostError as its reason, the moment the lock (any of its names) is known lost. */
  get signal(): AbortSignal {
    if (!this.parts) return this.lease.signal;
    return (this.anyLost ??= AbortSignal.any(this.parts.map((part) => part.signal)));
  }

  /** True while the lock is held and not known lost (every name, for several). */
  get isHeld(): boolean {
    return this.releasing === undefined && this.isActive;
  }

  /** Owner-checked and idempotent; never rejects (a lost lease is reported through `signal`). Several names go back at once. */
  release(): Promise<void> {
    this.releasing ??= this.parts ? Promise.all(this.parts.map((part) => part.release())).then(() => undefined) : this.lease.exit();
    return this.releasing;
  }

  /**
   * Renews the lease now, to `ttlMs` from now (default: the current ttl), and keeps that ttl for
   * later renewals. Rejects with LockLostError when the lease is no longer ours.
   */
  extend(ttlMs?: number): Promise<void> {
    if (this.releasing) return Promise.reject(new DistributedLockError(`Lock "${this.name}" was released; acquire it again.`));
    if (this.parts) return Promise.all(this.parts.map((part) => part.extend(ttlMs))).then(() => undefined);
    return this.lease.extend(ttlMs);
  }

  /** @internal Every name's lease is active. */
  get isActive(): boolean {
    return this.parts ? this.parts.every((part) => part.lease.isActive) : this.lease.isActive;
  }

  /** @internal The first loss among the names, if any. */
  get lost(): LockLostError | undefined {
    if (!this.parts) return this.lease.lost;
    for (const part of this.parts) if (part.lease.lost) return part.lease.lost;
    return undefined;
  }

  /** @internal How long the lock has been held (the shortest of its names'). */
  get heldMs(): number {
    return this.parts ? Math.min(...this.parts.map((part) => part.lease.heldMs)) : this.lease.heldMs;
  }
}
