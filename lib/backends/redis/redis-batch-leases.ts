import { deadlines } from '../../deadlines';
import { driftAllowanceMs } from '../../lock-defaults';
import type { LockGrant } from '../lock-backend.interface';
import type { RedisBatch } from './redis-batch';

/**
 * A grant whose lease, counted from a moment known to precede it, has less than this share of
 * its ttl left is confirmed with the server before the caller gets it: the lease's first
 * renewal comes a third of the ttl after the grant, too late for a shorter remainder.
 */
const LATE_GRANT_SHARE = 1 / 3;

/**
 * How long a hand-over waits before Redis is told of it, so that the hand-overs of a contended
 * name share one renewal: in a sale whose critical sections take a few round trips each, a
 * renewal per hand-over was a quarter of the commands. Never more than a quarter of the lease
 * the new holder runs under meanwhile, which a holder hands over with at least 50 ms left.
 */
export const RECORD_DELAY_MS = 10;

/** A lease of `ttlMs` counted from `requestedAt` has too little left to hand out unconfirmed. */
export function isLate(requestedAt: number, ttlMs: number): boolean {
  return requestedAt + ttlMs - performance.now() < ttlMs * LATE_GRANT_SHARE;
}

/** What the leases need of the backend. */
export interface BatchLeaseServer {
  /** Owner-checked renewal of the batch's entry: 1 renewed, 0 no longer ours. */
  renew(batch: RedisBatch, ttlMs: number): Promise<0 | 1>;
  /** The ttl the entry's lease must have for whoever holds under it now, if anyone does. */
  holderTtl(batch: RedisBatch): number | undefined;
}

/**
 * The lease of each caller served under a batch's entry. The entry's lease at Redis is that of
 * whoever in the batch holds now (under a read entry, the longest of its readers'): a caller served at once after the entry's grant (or a
 * confirmation) with the ttl Redis has counts from then; any other caller runs under the lease
 * the entry already has (`LockGrant.provisional`) until Redis has renewed the entry to its ttl,
 * with one renewal per run of hand-overs (RECORD_DELAY_MS).
 */
export class BatchLeases {
  constructor(private readonly server: BatchLeaseServer) {}

  /** The next grant under `batch`, for a caller with `ttlMs`: `grant` with its lease's times. */
  next(batch: RedisBatch, ttlMs: number, handedOverForMs: number | undefined, grant: Omit<LockGrant, 'requestedAt' | 'provisional'>): LockGrant {
    const lease = batch.lease;
    // A read entry serves every reader waiting at its grant at once: each counts from that grant.
    if (batch.mode !== 'read') batch.lease = undefined;
    // Spelled out rather than spread: every lock cycle passes here.
    const { key, owner, fencingToken, lost } = grant;
    if (handedOverForMs === undefined && lease?.ttlMs === ttlMs) return { key, owner, fencingToken, lost, requestedAt: lease.from };
    const now = performance.now();
    const validUntil = handedOverForMs !== undefined ? now + handedOverForMs : lease ? lease.from + lease.ttlMs - driftAllowanceMs(lease.ttlMs) : now;
    const provisional = { validUntil, recorded: this.record(batch, Math.min(RECORD_DELAY_MS, (validUntil - now) / 4)) };
    return { key, owner, fencingToken, lost, requestedAt: now, provisional };
  }

  /** One renewal for every hand-over of `batch` within `delayMs` of this one. */
  private record(batch: RedisBatch, delayMs: number): Promise<number | undefined> {
    if (batch.record) return batch.record.promise;
    let resolve!: (from: number | undefined) => void;
    const promise = new Promise<number | undefined>((done) => (resolve = done));
    batch.record = { promise, resolve };
    deadlines.add(performance.now() + Math.max(0, delayMs), () => {
      batch.record = undefined;
      const ttlMs = batch.state === 'holding' ? this.server.holderTtl(batch) : undefined;
      // Everyone it was for has let go.
      if (ttlMs === undefined) return resolve(undefined);
      const sentAt = performance.now();
      this.server.renew(batch, ttlMs).then(
        (renewed) => resolve(renewed === 1 ? sentAt : undefined),
        // Could not tell: the holder's own renewals decide, within the lease it was handed.
        () => undefined,
      );
    });
    return promise;
  }
}
