import { Batch } from '../../queue/batch';
import { scriptMode } from './redis-mode-scripts';

/** A `performance.now()` time the server's lease of an entry counts from, and its length. */
export interface EntryLease {
  readonly from: number;
  readonly ttlMs: number;
}

/**
 * A batch of this process's callers (see Batch) behind one entry in a Redis lock queue: a write
 * entry runs the scripts of redis-lock-scripts.ts, a read or permit entry those of
 * redis-mode-scripts.ts. The entry's owner id is this process's client id with the batch id
 * (`~q<n>`, or `~t<n>` for a try); its token is the fence the entry took when it queued, so
 * the n-th caller served under it has the token `(fence << 16) + n`.
 */
export class RedisBatch extends Batch {
  /** The ttl the entry was put with: its first caller's. */
  ttlMs = 0;
  /** performance.now() before the acquire script was first sent: no grant of the entry began earlier. */
  askedAt = 0;
  /** The acquire script's reply came (granted, or queued). */
  answered = false;
  /** The entry queued behind another (its acquire script did not grant it at once). */
  queued = false;
  /** A grant that came late is being confirmed with the server (see RedisLockBackend.grantLate). */
  confirming = false;
  /**
   * The server's lease as last set for the caller served next: from the entry's grant, or from
   * a confirmation. Taken by that caller's grant.
   */
  lease?: EntryLease;
  /**
   * The renewal that tells Redis of the hand-overs inside the batch since the last one (one per
   * run of hand-overs, sent RECORD_DELAY_MS after the first): resolves with when it was sent, or with
   * undefined when the entry was no longer ours. See RedisLockBackend.recordHandOver.
   */
  record?: { readonly promise: Promise<number | undefined>; readonly resolve: (from: number | undefined) => void };

  constructor(
    name: string,
    id: string,
    /** The entry's owner id in Redis: unique across processes. */
    readonly owner: string,
  ) {
    super(name, id);
  }

  /** A read or permit entry's mode as the scripts take it. */
  get scriptMode(): string {
    return scriptMode(this);
  }

  /** The owner key's value while the entry holds: what every owner-checked script compares. */
  get ownerValue(): string {
    return `${this.entryToken} ${this.owner}`;
  }
}
