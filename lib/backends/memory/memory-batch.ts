import { Batch } from '../../queue/batch';
import type { MemoryEntry, MemoryGrant } from './memory-lock-store';

/**
 * A batch of one client's callers (see Batch) behind one entry in the store. The entry's token is
 * the store's fence, so the n-th caller served under it has the token `(fence << 16) + n`.
 */
export class MemoryBatch extends Batch {
  /** The entry in the store while it is queued or holds. */
  entry?: MemoryEntry;
  /** The store's grant of the entry, once it holds: its lost signal is every holder's. */
  held?: MemoryGrant;
  /** performance.now() when the store's lease of the entry ends, as last set. */
  leaseEnd = 0;
  /** The entry's lease was just set for its ttl and no caller was served under it yet. */
  fresh = false;
  /** Entries the batch has put: a batch whose entry was lost puts a new one under a new owner id. */
  private puts = 0;

  /** The next entry's owner id in the store: the batch id, unique in the process (every client of a store is in it). */
  nextOwner(): string {
    const put = this.puts++;
    return put === 0 ? this.id : `${this.id}.${put}`;
  }
}
