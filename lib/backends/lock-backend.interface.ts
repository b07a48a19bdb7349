/**
 * The contract every backend implements. A backend waits natively (a FIFO queue with push
 * wake-up) and reports; it never polls on behalf of the service layer. Everything that is the
 * same for every backend (re-entrancy, key templates, renewal scheduling, the lost-lock path,
 * wait timeouts) lives once above this line, in LockService and LockHandle.
 */
export interface LockBackend {
  /** Short name used in errors and logs: 'memory', 'redis', 'etcd', 'zookeeper'. */
  readonly name: string;

  /**
   * Longest key, in UTF-8 bytes, the backend accepts as is. LockService hashes longer keys
   * (see lock-key.ts), so backends never see a key longer than this.
   */
  readonly maxKeyBytes: number;

  /**
   * The server(s) as errors show them, e.g. '127.0.0.1:6379' (never a password); omitted by an
   * in-process backend.
   */
  readonly address?: string;

  /**
   * Why the server cannot be reached right now (the client's own error), or undefined when it
   * can or the backend cannot tell. Asked when a wait ends without a grant, so that the caller is
   * told the server is down (LockServerUnreachableError) rather than that the lock was busy.
   */
  unreachable?(): Error | undefined;

  /**
   * One cheap round trip to the server, for health checks; rejects when it cannot be made.
   * Optional: without it, a health check takes and releases a reserved key (two round trips).
   */
  ping?(): Promise<void>;

  /**
   * The server's view of the lock on `key` (never this process's memory alone), for operators.
   * Optional for custom backends; every built-in backend has it.
   */
  inspect?(key: string): Promise<LockInspection>;

  /**
   * Operators' escape hatch: removes the current holder's lease on the server whoever holds it,
   * so the next waiter is granted. The holder learns at its next contact with the server (its
   * lost signal fires); fencing tokens make its late writes harmless. Resolves true when a
   * holder was removed, false when the lock was free.
   */
  forceRelease?(key: string): Promise<boolean>;

  /**
   * The entry modes this backend grants besides 'write' (see EntryMode). LockService refuses a
   * read lock or a semaphore on a backend that does not list its mode, with a LockConfigError
   * naming the backends that do, before any I/O. Omitted: only 'write'.
   */
  readonly modes?: readonly EntryMode[];

  /**
   * Why this backend, as configured, does not grant `mode` (one it leaves out of `modes`), naming
   * the option to change: LockService's refusal says this instead of its generic message. Omitted:
   * the generic message.
   */
  modeRefusal?(mode: EntryMode): string | undefined;

  /**
   * The backend enforces `AcquireRequest.lockDelayMs` at its server. Omitted or false: LockService
   * refuses a lock-delay before any I/O, with `lockDelayRefusal()`'s reason when it gives one.
   */
  readonly lockDelay?: boolean;

  /**
   * Why this backend, as configured, cannot enforce a lock-delay for entries of `mode`, naming the
   * option to change; undefined when it can. Asked before `lockDelay`.
   */
  lockDelayRefusal?(mode: EntryMode): string | undefined;

  /**
   * How far the server's clock may run ahead of ours over a lease of `ttlMs`, when a backend
   * allows more than the library's own (1% + 2 ms): every local deadline is that much earlier.
   */
  driftAllowanceMs?(ttlMs: number): number;

  /**
   * Wait, first come first served, until the lock is granted to `request.owner`.
   * When `request.signal` aborts first, the backend leaves the queue (and releases a grant that
   * raced with the abort) and rejects with the signal's reason.
   */
  acquire(request: AcquireRequest): Promise<LockGrant>;

  /** Take the lock only if it is free right now; never queue. */
  tryAcquire(request: Omit<AcquireRequest, 'signal'>): Promise<LockGrant | null>;

  /**
   * Extend the lease to `ttlMs` from now, checked against the owner.
   * `false` means the lease is no longer ours; a rejection means "could not tell" (the service
   * keeps trying until the lease it last confirmed runs out).
   */
  renew(grant: LockGrant, ttlMs: number): Promise<boolean>;

  /**
   * Owner-checked and idempotent: releasing a lock that is gone or owned by another is a no-op.
   * `validForMs`: how much longer the caller knows the lease to be valid; omitted when it is
   * lost or unknown. A backend may hand the lock to a waiter of its own within that time,
   * without a round trip first (see `LockGrant.provisional`).
   */
  release(grant: LockGrant, validForMs?: number): Promise<void>;

  /** Abort every wait, fire every held grant's `lost`, close only the clients it created. */
  close(): Promise<void>;
}

/**
 * What a server-side entry asks for. A lock name is one queue of entries in a total order that
 * every process agrees on, whatever their modes; each entry may go by one rule over the entries
 * ahead of it in that queue:
 * - 'write' (the exclusive lock, the default): none ahead;
 * - 'read': no 'write' entry ahead (so a reader that arrives behind a waiting writer waits for it);
 * - 'permit' (one of a semaphore's `limit`): fewer than `limit` entries ahead.
 * Every grant's token is above every earlier grant's on the name, whatever the modes.
 */
export type EntryMode = 'write' | 'read' | 'permit';

export interface AcquireRequest {
  /** The full key: module keyPrefix + resolved name, hashed when longer than maxKeyBytes. */
  readonly key: string;
  /** Default 'write'. Another mode is asked for only when the backend lists it in `modes`. */
  readonly mode?: EntryMode;
  /**
   * For mode 'permit': the semaphore's limit, a positive integer. A backend rejects a permit
   * whose limit differs from that of a permit of the same key still queued or held (in any
   * process it can see) with a LockConfigError('limit', ...) naming both limits.
   */
  readonly limit?: number;
  /** Unique per acquisition; the backend grants and checks ownership by it. */
  readonly owner: string;
  /** Lease length. Backends with coarser leases round up and say how in their docs. */
  readonly ttlMs: number;
  /**
   * Lock-delay: when this entry's lease ends without a release, the server grants the name to
   * nobody for this long after. Omitted or 0: none. Given only to a backend with `lockDelay`.
   */
  readonly lockDelayMs?: number;
  /**
   * Aborts when the caller stops waiting (timeout, its own signal, shutdown). LockService makes
   * it on first access, so a backend that grants at once should look at it only once it has to
   * wait (an abort before then is seen at that first look).
   */
  readonly signal: AbortSignal;
}

/** One granted lease, as the backend sees it. */
export interface LockGrant {
  readonly key: string;
  readonly owner: string;
  /** Strictly greater than every earlier grant of the same key. */
  readonly fencingToken: bigint;
  /**
   * Aborted by the backend the moment it knows the lease is gone without asking (session
   * expired, key deleted). Backends that can only find out by asking leave it to `renew`.
   */
  readonly lost: AbortSignal;
  /**
   * A `performance.now()` time known to precede the server's grant (the request that won it,
   * the server's grant time mapped to local time, or the session's last confirmed moment), so a
   * grant that arrives late is never a fresh lease: the local deadline counts from it. Omitted:
   * from when the grant arrived, which only a backend whose grants cannot arrive late may do.
   */
  readonly requestedAt?: number;
  /**
   * Set when the lock was handed over inside this process before the server recorded the new
   * holder (the Redis backend's local hand-off). Until `recorded` resolves, the lease is known
   * valid only until `validUntil` (a `performance.now()` time: the previous holder's own
   * deadline). `recorded` resolves with the `performance.now()` time the server's lease counts
   * from, or with `undefined` when the server refused: the lock is then lost.
   */
  readonly provisional?: { readonly validUntil: number; readonly recorded: Promise<number | undefined> };
}

/** What `LockBackend.inspect` reports. */
export interface LockInspection {
  readonly held: boolean;
  /** The mode of the holders' entries; omitted when free. 'permit' for a semaphore. */
  readonly mode?: EntryMode;
  /** For a semaphore: its limit. */
  readonly limit?: number;
  /**
   * Every holder, oldest first, when more than one may hold (readers, permits); `holder` is the
   * first of them. A backend that cannot list them reports `holder` only.
   */
  readonly holders?: readonly LockHolder[];
  readonly holder?: LockHolder;
  /** Callers queued behind the holder, over every process, as far as the server can tell. */
  readonly waiting: number;
}

/** One holder of a lock, as `LockBackend.inspect` reports it. */
export interface LockHolder {
  readonly owner: string;
  /** The token the holder's handle shows (for an in-process hand-over: as last recorded on the server). */
  readonly fencingToken: bigint;
  readonly heldForMs?: number;
  readonly expiresInMs?: number;
  /**
   * Which machine and process holds it: that process's module option `holderDescription` (host
   * name and pid by default), where the backend stores one (README, "Inspect").
   */
  readonly description?: string;
}
