import { Batch, type QueuedCaller } from '../../queue/batch';

/**
 * A grant whose lease, counted from a moment known to precede it, has less than this share of its
 * ttl left is confirmed (renewed) before its caller gets it: the first renewal comes a third of
 * the ttl after the grant, too late for a shorter remainder.
 */
export const LATE_GRANT_SHARE = 1 / 3;

/**
 * A batch of this process's callers (see Batch) behind one entry in the database's queue, of the
 * batch's mode (see PostgresEntryStatements). Its entry token is the sequence value the database
 * granted it with, so the n-th caller's token is `(sequence value << 16) + n`.
 */
export class PostgresBatch extends Batch {
  /** The owner of the entry at the server: unique across processes. */
  readonly entry: string;
  /**
   * The lease the entry asks for: the longest ttl among the callers that joined before it was
   * sent. A caller that joins later is served under it, renewing first if too little is left for it.
   */
  ttlMs = 0;
  /** When the statement that queued the entry was sent: no grant of it can have started earlier. */
  askedAt = 0;
  /** When the entry's liveness was last refreshed at the server (queued, or checked). */
  refreshedAt = 0;
  /** The server's lease of the entry counts from this local time, for `leaseTtlMs` (set by each grant and renewal). */
  leaseFrom = 0;
  leaseTtlMs = 0;
  /** A grant notified before the queuing statement's answer arrived (another connection can be faster). */
  earlyGrant?: { fence: bigint; serverMs: number };
  /** The local time after which the current holder's lease has surely ended at the server: check then. */
  holderEndsAt = Infinity;
  /** A late grant is being confirmed with the server before its caller gets it. */
  confirming = false;
  /** The entry's lease turned out gone: no caller is served under it any more. */
  lost = false;

  constructor(name: string, id: string, clientId: string) {
    super(name, id);
    this.entry = `${clientId}${id}`;
  }

  override add(caller: QueuedCaller): void {
    super.add(caller);
    if (this.state === 'open') this.ttlMs = Math.max(this.ttlMs, Math.ceil(caller.request.ttlMs));
  }

  /** How long the entry's row stays in the queue without a refresh: a dead process's entry is skipped after that. */
  get aliveMs(): number {
    return Math.min(Math.max(this.ttlMs, 500), 60_000);
  }
}
