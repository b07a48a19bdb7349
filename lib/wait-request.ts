import type { AcquireRequest, EntryMode, LockBackend, LockGrant } from './backends/lock-backend.interface';
import { deadlines, type Deadline } from './deadlines';
import { LockServerUnreachableError, LockTimeoutError } from './errors';
import { PendingWait } from './queue/pending-wait';
import { listenToAbort, stopListeningToAbort, type AbortWatcher } from './shared-abort-listeners';

/**
 * One acquisition's request to the backend, and the caller's wait for its grant: one object from
 * the call to the backend's queue. A queueing backend (LocalQueues) settles it directly; any
 * other backend's promise is bound to it (bound). Its signal is made only when a backend looks at
 * it or the wait must end: making an AbortSignal is not free, and most lock calls never need one.
 */
export class WaitRequest extends PendingWait<LockGrant> implements AcquireRequest, AbortWatcher {
  private controller?: AbortController;
  private timer?: Deadline;
  private callerSignal?: AbortSignal;
  private stopped?: { reason: unknown };

  /** The grant, or the stop reason as soon as the wait is stopped (the caller's deadline holds whatever the backend does). */
  granted!: Promise<LockGrant>;

  constructor(
    readonly key: string,
    readonly owner: string,
    readonly ttlMs: number,
    /** `performance.now()` when the caller asked: the wait's clock counts from it. */
    readonly started: number,
    readonly mode: EntryMode = 'write',
    readonly limit?: number,
    readonly lockDelayMs?: number,
  ) {
    super();
  }

  /**
   * Ends the wait `waitTimeoutMs` after it started, or when the caller's signal aborts. A wait
   * that ends while the server cannot be reached says so, rather than blaming a holder.
   */
  startClock(name: string, waitTimeoutMs: number, callerSignal: AbortSignal | undefined, backend: LockBackend): void {
    const started = this.started;
    if (waitTimeoutMs !== Infinity) {
      // Kept alive for: a process waiting for a lock is not done.
      this.timer = deadlines.add(
        started + waitTimeoutMs,
        () => {
          const waitedMs = Math.round(performance.now() - started);
          const down = backend.unreachable?.();
          this.stop(
            down
              ? new LockServerUnreachableError(backend.name, `acquire "${name}"`, backend.address ?? backend.name, waitedMs, down)
              : new LockTimeoutError(name, waitedMs),
          );
        },
        true,
      );
    }
    if (callerSignal) {
      this.callerSignal = callerSignal;
      listenToAbort(callerSignal, this);
    }
  }

  stopClock(): void {
    deadlines.cancel(this.timer);
    if (this.callerSignal) stopListeningToAbort(this.callerSignal, this);
  }

  /** AbortWatcher: the caller's signal aborted. */
  override aborted(reason: unknown): void {
    this.stop(reason);
  }

  /** Made on first access; already aborted when the wait was stopped before. */
  get signal(): AbortSignal {
    if (!this.controller) {
      this.controller = new AbortController();
      if (this.stopped) this.controller.abort(this.stopped.reason);
    }
    return this.controller.signal;
  }

  /**
   * The grant of a backend that does not settle this wait itself: a grant that arrives after the
   * wait was stopped goes to `late`.
   */
  bound(granted: Promise<LockGrant>, late: (grant: LockGrant) => void): Promise<LockGrant> {
    granted.then(
      (grant) => {
        if (!this.resolve(grant) && !this.resolvedWith(grant)) late(grant);
      },
      (error) => void this.reject(error),
    );
    return this.promise;
  }

  /** Ends the wait: the caller at once with `reason`, the backend through its abandon hook or the signal. */
  stop(reason: unknown): void {
    if (this.stopped) return;
    this.stopped = { reason };
    this.controller?.abort(reason);
    super.aborted(reason);
  }

  /** `error` is the reason this request was stopped with (not a backend failure). */
  stoppedWith(error: unknown): boolean {
    return this.stopped !== undefined && this.stopped.reason === error;
  }
}
