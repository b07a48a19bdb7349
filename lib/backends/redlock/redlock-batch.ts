import { Batch, type QueuedCaller } from '../../queue/batch';
import type { Won } from './redlock-votes';

/**
 * A batch of this process's callers (see Batch) behind one Redlock entry: its id is the value
 * set on the masters, its entry token the vote's fence, so the n-th caller's token is
 * `(fence << 16) + n`. The entry's lease on the masters counts from `leaseFrom` for `ttlMs`.
 */
export class RedlockBatch extends Batch {
  /** The ttl the entry asks the masters for: the longest of its callers'. */
  ttlMs = 0;
  /** performance.now() when the request that set or last extended the entry was sent. */
  leaseFrom = 0;
  /** The wait for this batch's vote (a RedlockAcquisition), stopped when the batch ends. */
  acquisition?: { stop(): void };
  /** The vote that won the entry: its release raises the masters that were not seen in step. */
  won?: Won;
  /** The entry no longer holds a majority: it serves nobody any more. */
  lost = false;

  override add(caller: QueuedCaller): void {
    super.add(caller);
    this.ttlMs = Math.max(this.ttlMs, caller.request.ttlMs);
  }
}
