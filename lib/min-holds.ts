import { deadlines, type Deadline } from './deadlines';
import type { LockHandle } from './lock-handle';

/**
 * Locks whose code finished before their `minHoldMs` (a run-once job's `lockAtLeastFor`):
 * released by a timer in the background, or at shutdown.
 */
export class MinHolds {
  private readonly timers = new Map<LockHandle, Deadline>();

  /**
   * Releases now, or, when the lock was taken less than `minHoldMs` ago, later in the background
   * (the caller is not kept waiting). A re-entrant handle's lock is its outer holder's to keep.
   */
  releaseAfter(handle: LockHandle, minHoldMs: number): Promise<void> {
    if (minHoldMs === 0 || handle.reentrant) return handle.release();
    const leftMs = minHoldMs - handle.heldMs;
    if (leftMs <= 0 || !handle.isActive) return handle.release();
    // Not kept alive: a process that exits meanwhile leaves the lock to its lease, which covers minHoldMs.
    const timer = deadlines.add(performance.now() + leftMs, () => {
      this.timers.delete(handle);
      void handle.release();
    });
    this.timers.set(handle, timer);
    return Promise.resolve();
  }

  /** Shutdown: every lock still kept for its minimum hold goes now. */
  releaseAll(): void {
    for (const [handle, timer] of this.timers) {
      deadlines.cancel(timer);
      void handle.release();
    }
    this.timers.clear();
  }
}
