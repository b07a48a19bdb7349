import type { StoppableRequest } from './backends/built-in-backend';
import type { EntryMode, LockBackend, LockGrant } from './backends/lock-backend.interface';
import { deadlines, type Deadline } from './deadlines';
import { LockServerUnreachableError, LockTimeoutError } from './errors';
import { listenToAbort, stopListeningToAbort, type AbortWatcher } from './shared-abort-listeners';

/**
 * One acquisition's request to the backend. Its signal is made only when a backend looks at it
 * (most grants come at once, before any backend needs it) or when the wait must end: making an
 * AbortSignal is not free, and most lock calls never need one.
 */
export class WaitRequest implements StoppableRequest, AbortWatcher {
  private controller?: AbortController;
  private timer?: Deadline;
  private callerSignal?: AbortSignal;
  private onStopped?: (reason: unknown) => void;
  private stopWatcher?: AbortWatcher;
  private stopped?: { reason: unknown };

  /** The backend's promise of the grant, bounded by this request's stop (see bound). */
  granted!: Promise<LockGrant>;

  constructor(
    readonly key: string,
    readonly owner: string,
    readonly ttlMs: number,
    /** `performance.now()` when the caller asked: the wait's clock counts from it. */
    readonly started: number,
    readonly mode: EntryMode = 'write',
    readonly limit?: number,
  ) {}

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
  aborted(reason: unknown): void {
    this.stop(reason);
  }

  get signal(): AbortSignal {
    return (this.controller ??= new AbortController()).signal;
  }

  /** StoppableRequest.onStop: one watcher (the backend's wait for this request). */
  onStop(watcher: AbortWatcher): void {
    if (this.stopped) watcher.aborted(this.stopped.reason);
    else this.stopWatcher = watcher;
  }

  /**
   * `granted`, or the stop reason as soon as the wait is stopped, even if the backend has not
   * answered yet (a server that is paused or black-holed): the caller's deadline holds whatever
   * the backend does. A grant that arrives after that goes to `late`. No AbortSignal is made
   * for this: most grants come before any stop.
   */
  bound(granted: Promise<LockGrant>, late: (grant: LockGrant) => void): Promise<LockGrant> {
    return new Promise<LockGrant>((resolve, reject) => {
      let settled = false;
      this.onStopped = (reason) => {
        if (settled) return;
        settled = true;
        reject(reason);
        granted.then(late, () => undefined);
      };
      granted.then(
        (grant) => {
          if (settled) return; // stopped first: onStop handed it to `late`
          settled = true;
          resolve(grant);
        },
        (error) => {
          if (settled) return;
          settled = true;
          reject(error);
        },
      );
    });
  }

  /** Ends the wait: the backend is told through the signal, the caller at once with `reason`. */
  stop(reason: unknown): void {
    if (this.stopped) return;
    this.stopped = { reason };
    (this.controller ??= new AbortController()).abort(reason);
    this.stopWatcher?.aborted(reason);
    this.onStopped?.(reason);
  }

  /** `error` is the reason this request was stopped with (not a backend failure). */
  stoppedWith(error: unknown): boolean {
    return this.stopped !== undefined && this.stopped.reason === error;
  }
}
