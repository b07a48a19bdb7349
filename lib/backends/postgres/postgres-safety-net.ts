import { Logger } from '@nestjs/common';
import type { ServerClock } from '../server-clock';
import type { CheckRow } from './postgres-statements';

const logger = new Logger('DistributedLock');

/** A check due at the end of a holder's lease waits this much longer, so the lease has surely ended at the server. */
const AFTER_LEASE_MS = 25;
/** A check that failed is tried again this soon. */
const RETRY_MS = 250;

/** What the safety net needs of a waiting entry (a batch's, of any mode). */
export interface WaitingEntry {
  readonly key: string;
  readonly state: string;
  /** The local time after which the current holder's lease has surely ended at the server: check then. */
  holderEndsAt: number;
  /** When the entry's liveness was last refreshed at the server (queued, or checked). */
  refreshedAt: number;
  readonly aliveMs: number;
}

export interface SafetyNetEvents<E extends WaitingEntry> {
  /** The check found the entry holding the lock, with `leftMs` of its lease left at local time `leaseEndsAfter - leftMs`. */
  granted(batch: E, fence: bigint, leaseEndsAfter: number): void;
  /**
   * The entry's callers left while the check was on its way: the check may have queued it again
   * (or found it granted) after it left, so it leaves once more.
   */
  left(batch: E): void;
}

/**
 * What keeps a waiter from being stranded without polling for the lock: one statement, for every
 * entry this process has waiting, that refreshes each entry's liveness, takes over a lock whose
 * holder's lease ran out (a crashed holder), and reports grants whose notification was lost (a
 * LISTEN connection that dropped). It runs at the end of the current holders' leases, at a third
 * of the entries' liveness, and whenever LISTEN is back in place.
 */
export class PostgresSafetyNet<E extends WaitingEntry> {
  private timer?: NodeJS.Timeout;
  private dueAt = Infinity;
  private running = false;
  private again = false;
  private stopped = false;
  /** Warned once per outage, not at every retry. */
  private failing = false;

  constructor(
    /** One statement that checks every entry given (sorted by name), answering a row per entry in their order. */
    private readonly run: (entries: E[]) => Promise<CheckRow[]>,
    private readonly clock: ServerClock,
    private readonly waiting: () => Iterable<E>,
    private readonly events: SafetyNetEvents<E>,
  ) {}

  /** Re-arms the timer for the earliest check any waiting entry needs. */
  schedule(): void {
    let due = Infinity;
    for (const batch of this.waiting()) due = Math.min(due, batch.holderEndsAt + AFTER_LEASE_MS, batch.refreshedAt + batch.aliveMs / 3);
    this.arm(due);
  }

  checkNow(): void {
    this.arm(performance.now());
  }

  stop(): void {
    this.stopped = true;
    clearTimeout(this.timer);
  }

  private arm(at: number): void {
    if (this.stopped || at === Infinity) return;
    if (this.timer && at >= this.dueAt) return;
    clearTimeout(this.timer);
    this.dueAt = at;
    this.timer = setTimeout(() => {
      this.timer = undefined;
      this.dueAt = Infinity;
      void this.check();
    }, Math.max(0, at - performance.now()));
    this.timer.unref();
  }

  private async check(): Promise<void> {
    if (this.running) {
      this.again = true;
      return;
    }
    const batches = [...this.waiting()].sort((a, b) => (a.key < b.key ? -1 : a.key > b.key ? 1 : 0));
    if (batches.length === 0 || this.stopped) return;
    this.running = true;
    const sentAt = performance.now();
    try {
      const rows = await this.run(batches);
      this.failing = false;
      const now = performance.now();
      for (const [i, row] of rows.entries()) {
        const batch = batches[i];
        if (i === 0) this.clock.sample(row.server_ms, sentAt);
        batch.refreshedAt = sentAt;
        if (batch.state === 'ended') this.events.left(batch);
        if (batch.state !== 'queued') continue;
        if (row.granted_fence !== null) this.events.granted(batch, BigInt(row.granted_fence), sentAt + row.left_ms);
        else batch.holderEndsAt = now + row.left_ms;
      }
    } catch (error) {
      if (!this.failing) logger.warn(`Checking the lock queue failed, retrying: ${(error as Error).message}`);
      this.failing = true;
      this.arm(performance.now() + RETRY_MS);
    } finally {
      this.running = false;
    }
    if (this.again) {
      this.again = false;
      this.arm(performance.now());
    }
    this.schedule();
  }
}
