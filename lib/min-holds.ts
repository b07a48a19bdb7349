import { deadlines, type Deadline } from './deadlines';
import type { LockHandle } from './lock-handle';

/**
 * Locks whose code finished before their `minHoldMs` (a run-once job's `lockAtLeastFor`):
 * released by a timer in the background, or at shutdown.
 */
export class MinHolds {
  private readonly timers = new Map<LockHandle, { timer: Deadline; begun: () => void }>();

  /**
   * Releases now, or, when the lock was taken less than `minHoldMs` ago, later in the background
   * (the caller is not kept waiting). A re-entrant handle's lock is its outer holder's to keep.
   * `begun` is told as the release begins, whenever that is.
   */
  releaseAfter(handle: LockHandle, minHoldMs: number, begun: () => void): Promise<void> {
    if (minHoldMs === 0 || handle.reentrant) return releaseNow(handle, begun);
    const leftMs = minHoldMs - handle.heldMs;
    if (leftMs <= 0 || !handle.isActive) return releaseNow(handle, begun);
    // Not kept alive: a process that exits meanwhile leaves the lock to its lease, which covers minHoldMs.
    const timer = deadlines.add(performance.now() + leftMs, () => {
      this.timers.delete(handle);
      void releaseNow(handle, begun);
    });
    this.timers.set(handle, { timer, begun });
    return Promise.resolve();
  }

  /** Shutdown: every lock still kept for its minimum hold goes now. */
  releaseAll(): void {
    for (const [handle, { timer, begun }] of this.timers) {
      deadlines.cancel(timer);
      void releaseNow(handle, begun);
    }
    this.timers.clear();
  }
}

/** `begun` first: the scope is over once the release starts, and the release's own promises need no context. */
function releaseNow(handle: LockHandle, begun: () => void): Promise<void> {
  begun();
  return handle.release();
}
