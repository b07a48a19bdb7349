/**
 * Every error this library throws is a `DistributedLockError`, so one `instanceof` check in an
 * exception filter catches them all; the subclasses carry the data a caller needs to react.
 */
export class DistributedLockError extends Error {
  constructor(message: string, options?: { cause?: unknown }) {
    super(message, options);
    this.name = new.target.name;
  }
}

/** A lock key could not be built: a bad template, or an argument that must not become part of a key. */
export class LockKeyError extends DistributedLockError {
  constructor(
    message: string,
    /** The template as written, or `'(function)'` for a key function. */
    readonly template: string,
    /** `Class.method` for `@WithLock`, the LockService method otherwise. */
    readonly method: string,
    /** The part that failed, e.g. `<0.sku>`. */
    readonly part?: string,
  ) {
    super(message);
  }
}

/** The lock was not granted within `waitTimeoutMs`. */
export class LockTimeoutError extends DistributedLockError {
  constructor(
    readonly key: string,
    readonly waitedMs: number,
  ) {
    super(
      `Lock "${key}" was not acquired within ${waitedMs} ms. ` +
        'Raise waitTimeoutMs (module option or per call) if the holder legitimately needs longer.',
    );
  }
}

/** Why a held lock is known to be gone. */
export type LockLostReason =
  /** The backend answered a renewal: the lease is no longer ours. */
  | 'renewal-refused'
  /** No renewal succeeded before the lease ran out (connection down, process paused). */
  | 'lease-expired'
  /** The backend told us directly (session expired, key deleted by someone else). */
  | 'backend-reported'
  /** The module is shutting down and closed its backend. */
  | 'backend-closed';

/**
 * The lock ended before the critical section did. Whatever the section wrote may have interleaved
 * with another holder: use the fencing token on writes so the storage can refuse the stale one.
 */
export class LockLostError extends DistributedLockError {
  constructor(
    readonly key: string,
    readonly fencingToken: bigint,
    readonly reason: LockLostReason,
    options?: { cause?: unknown },
  ) {
    super(
      `Lock "${key}" (fencing token ${fencingToken}) was lost before the critical section ended ` +
        `(${reason}). Raise ttlMs if the handler runs longer than the lease, or set ` +
        "onLockLost: 'ignore' if the handler checks its lock's signal itself.",
      options,
    );
  }
}

/** A backend call failed for a transport or server reason; `cause` is the client's own error. */
export class LockBackendError extends DistributedLockError {
  constructor(
    readonly backend: string,
    readonly operation: string,
    cause: unknown,
  ) {
    super(`${backend} backend failed to ${operation}: ${describe(cause)}`, { cause });
  }
}

/** Module options that cannot work; the message names the option to change. */
export class LockConfigError extends DistributedLockError {
  constructor(
    readonly option: string,
    message: string,
  ) {
    super(`Invalid distributed lock option "${option}": ${message}`);
  }
}

function describe(cause: unknown): string {
  return cause instanceof Error ? cause.message : String(cause);
}
