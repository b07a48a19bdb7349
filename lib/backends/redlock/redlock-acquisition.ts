import type { LockServerUnreachableError } from '../../errors';
import { deadlines, type Deadline } from '../../deadlines';
import type { RedlockBatch } from './redlock-batch';
import type { RedlockVotes, Vote, Won } from './redlock-votes';

/** What the backend does with the outcome of a batch's wait. */
export interface AcquisitionReport {
  won(batch: RedlockBatch, vote: Won): void;
  failed(batch: RedlockBatch, error: LockServerUnreachableError): void;
}

export interface AcquisitionTiming {
  /** A majority unreachable for this long (the module's serverTimeoutMs) ends the wait. */
  readonly serverTimeoutMs: number;
  /** The random delay before retrying after a split vote, at most. */
  readonly retryJitterMs: number;
  /** The longest a waiter goes without trying again, in case a word was lost. */
  readonly safetyNetMs: number;
  /** How long a master keeps a waiter that stopped trying before passing it over. */
  readonly staleAfterMs: number;
}

/** How soon to try again while too few masters answer: they may be restarting. */
export const UNREACHABLE_RETRY_MS = 50;

/**
 * One batch's wait for a majority: vote, and on a loss wait for a master's word that the lock
 * was freed (the release script publishes to the first waiting process), a split vote's jitter,
 * or the holders' keys running out, whichever comes first; at most safetyNetMs. No polling
 * otherwise: a waiting process is woken by the masters.
 */
export class RedlockAcquisition {
  private timer?: Deadline;
  private voting = false;
  /** A word came while a vote was out: that vote may have been too early, so try again at once. */
  private wordDuringVote = false;
  private stopped = false;
  private unreachableSince?: number;
  /** Where this batch's process stands among the masters' waiters: its first vote's wall-clock time. */
  private arrivedAt = 0;
  /** A vote went out before: masters that refused it list this process among their waiters. */
  private votedBefore = false;

  constructor(
    private readonly votes: RedlockVotes,
    private readonly batch: RedlockBatch,
    private readonly waiterId: string,
    private readonly timing: AcquisitionTiming,
    private readonly report: AcquisitionReport,
  ) {}

  start(): void {
    this.arrivedAt = Date.now();
    this.vote();
  }

  /** A master said the lock is free. */
  wake(): void {
    if (this.stopped) return;
    if (this.voting) {
      this.wordDuringVote = true;
      return;
    }
    deadlines.cancel(this.timer);
    void this.vote();
  }

  /** No more votes; one still out gives back what it wins (see vote). */
  stop(): void {
    this.stopped = true;
    deadlines.cancel(this.timer);
  }

  private vote(): void {
    if (this.stopped) return;
    this.voting = true;
    this.wordDuringVote = false;
    const { key, id, ttlMs } = this.batch;
    const startedAt = performance.now();
    const listed = this.votedBefore;
    this.votedBefore = true;
    this.votes.voteTo(key, id, ttlMs, this.waiterId, this.timing.staleAfterMs, this.arrivedAt, listed, (vote) => this.counted(vote, startedAt), this.batch.lockDelayMs);
  }

  /** The outcome of a vote that began at `startedAt`. */
  private counted(vote: Vote, startedAt: number): void {
    const { key, id } = this.batch;
    this.voting = false;
    if (vote.won) {
      if (this.stopped) return this.votes.giveBack(key, id, this.waiterId);
      return this.report.won(this.batch, vote);
    }
    if (this.stopped) return;
    if (vote.unreachable) {
      // From this vote's start: waiting for the masters to connect counts too.
      this.unreachableSince ??= startedAt;
      if (performance.now() - this.unreachableSince >= this.timing.serverTimeoutMs) return this.report.failed(this.batch, vote.unreachable);
      return this.retryIn(UNREACHABLE_RETRY_MS);
    }
    this.unreachableSince = undefined;
    if (this.wordDuringVote) return this.retryIn(0);
    if (vote.split) return this.retryIn(this.jitter());
    // A crashed holder's keys run out without a word: try again then (jittered, as every waiter does).
    this.retryIn(Math.min(vote.freeInMs + 1 + this.jitter(), this.timing.safetyNetMs));
  }

  private retryIn(ms: number): void {
    if (ms <= 0) return void this.vote();
    this.timer = deadlines.add(performance.now() + ms, () => void this.vote());
  }

  private jitter(): number {
    return Math.random() * this.timing.retryJitterMs;
  }
}
