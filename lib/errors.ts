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

/**
 * An error about one lock (or several, comma-separated). `lockName` is the name the caller gave
 * (the resolved template), as `handle.name` shows it: `name` is taken by Error for the class name.
 */
export abstract class LockNameError extends DistributedLockError {
  constructor(
    readonly lockName: string,
    message: string,
    options?: { cause?: unknown },
  ) {
    super(message, options);
  }

  /** @deprecated The same as `lockName`; kept for callers of earlier versions. */
  get key(): string {
    return this.lockName;
  }
}

/** The lock was not granted within `waitTimeoutMs`. */
export class LockTimeoutError extends LockNameError {
  constructor(
    lockName: string,
    readonly waitedMs: number,
  ) {
    super(lockName, `Lock "${lockName}" was not acquired within ${waitedMs} ms. ` + 'Raise waitTimeoutMs (module option or per call) if the holder legitimately needs longer.');
  }
}

/** Why a held lock is known to be gone. */
export type LockLostReason =
  /** The backend answered a renewal: the lease is no longer ours. */
  | 'renewal-refused'
  /** No renewal was tried in time before the lease ran out (the handler or process was paused, or ran past `renew: false`). */
  | 'lease-expired'
  /** Renewals could not reach the server before the lease ran out: the server is down or cut off. */
  | 'server-unreachable'
  /** The backend told us directly (session expired, key deleted by someone else). */
  | 'backend-reported'
  /** The module is shutting down and closed its backend. */
  | 'backend-closed';

/**
 * The lock ended before the critical section did. Whatever the section wrote may have interleaved
 * with another holder: use the fencing token on writes so the storage can refuse the stale one.
 */
export class LockLostError extends LockNameError {
  constructor(
    lockName: string,
    readonly fencingToken: bigint,
    readonly reason: LockLostReason,
    options?: { cause?: unknown },
  ) {
    super(lockName, `Lock "${lockName}" (fencing token ${fencingToken}) was lost before the critical section ended: ${LOST_ADVICE[reason]}${causeText(options?.cause)}`, options);
  }
}

/** What each reason means for the user, and what to change, if anything. */
const LOST_ADVICE: Record<LockLostReason, string> = {
  'renewal-refused': 'the server no longer has this lease (it expired there or was taken over). Use the fencing token on writes so a stale holder is refused.',
  'lease-expired':
    "the lease ran out before it was renewed (the process was paused, or renew is false). Raise ttlMs if the handler runs longer than the lease, or set onLockLost: 'ignore' if the handler checks its lock's signal itself.",
  'server-unreachable': 'the server could not be reached to renew the lease before it ran out. Check that the server is up and reachable; raising ttlMs only delays this.',
  'backend-reported': 'the backend reported the lease gone (session expired, lock node or key deleted).',
  'backend-closed': 'the application shut down while the lock was held.',
};

function causeText(cause: unknown): string {
  return cause === undefined ? '' : ` (${describe(cause)})`;
}

/**
 * A backend call failed for a transport or server reason; `cause` is the client's own error.
 * `address` names the server(s) tried, as the backend was configured (never with a password).
 */
export class LockBackendError extends DistributedLockError {
  constructor(
    readonly backend: string,
    readonly operation: string,
    cause: unknown,
    readonly address?: string,
  ) {
    super(`${backend} backend${address ? ` (${address})` : ''} failed to ${operation}: ${describe(cause)}`, { cause });
  }
}

/**
 * The server could not be reached (down, refusing, paused or cut off) within the call's bound:
 * `min(waitTimeoutMs, serverTimeoutMs)` for an acquisition, `serverTimeoutMs` otherwise.
 */
export class LockServerUnreachableError extends LockBackendError {
  constructor(backend: string, operation: string, address: string, readonly waitedMs: number, cause?: unknown) {
    super(backend, operation, cause ?? new Error('no answer'), address);
    this.message =
      `Could not reach the ${backend} server at ${address} to ${operation} within ${waitedMs} ms` +
      `${cause === undefined ? '' : ` (${describe(cause)})`}. Check that the server is running and reachable from this process; ` +
      'serverTimeoutMs sets how long a call waits for it.';
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

/**
 * The lock doctor (module option `doctor: 'fail'`) found the servers configured in a way that
 * breaks locks, or could not check them: the application does not boot. `findings` are the
 * lines it logged; `unreachable` the servers it could not ask.
 */
export class LockDoctorError extends DistributedLockError {
  constructor(
    readonly backend: string,
    readonly findings: readonly string[],
    readonly unreachable: readonly string[],
  ) {
    super(
      `The lock doctor refused the ${backend} backend's servers (doctor: 'fail'):\n` +
        [...unreachable.map((server) => `could not reach ${server}`), ...findings].map((line) => `- ${line}`).join('\n') +
        "\nChange the settings named above, or set the module option doctor: 'warn' to boot anyway and log these.",
    );
  }
}

/**
 * The async call chain holds a lock in one mode and asked for it in a mode that mode does not
 * cover: write inside read (an upgrade, which deadlocks as soon as two readers try it), or a
 * lock inside a semaphore's permit of the same name. Thrown before any I/O.
 */
export class LockModeError extends LockNameError {
  constructor(
    lockName: string,
    /** The mode the chain holds: 'read', 'write' or 'permit' (a semaphore). */
    readonly heldMode: string,
    /** The mode asked for inside it. */
    readonly requestedMode: string,
  ) {
    super(
      lockName,
      `Lock "${lockName}" is held in ${heldMode} mode by this async call chain, which asked for it again in ${requestedMode} mode. ` +
        (heldMode === 'read' && requestedMode === 'write'
          ? 'Upgrading a read lock to write deadlocks when two readers try it: take the write lock from the start (it covers reads inside it).'
          : `Only the same mode (or read inside write) is re-entrant: release the ${heldMode} hold first, or take ${requestedMode} from the start.`),
    );
  }
}

function describe(cause: unknown): string {
  return cause instanceof Error ? cause.message : String(cause);
}
