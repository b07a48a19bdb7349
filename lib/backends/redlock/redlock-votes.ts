import { leaseField } from '../redis/redis-delay-lua';
import { LockServerUnreachableError } from '../../errors';
import type { Answer, RedlockMasters } from './redlock-masters';
import { VoteSlots } from './vote-slots';
import { acquireScript, leaveScript, raiseFenceScript, releaseScript, renewScript, type MasterVote } from './redlock-scripts';

/** Votes out at once per backend (see VoteSlots): enough to keep a burst's masters busy. */
const VOTES_IN_FLIGHT = 64;

/** A won vote: the token, and the moment the first request was sent (the lease counts from it). */
export interface Won {
  readonly won: true;
  readonly token: bigint;
  readonly sentAt: number;
  /**
   * Every master's answer, including those that came after the vote was decided: at the
   * release, a master that answered below the token has its fence raised (see fenceToRaise).
   */
  readonly answers: readonly Answer<MasterVote>[];
}

/** A lost vote, and what the waiter needs to know to try again. */
export interface Lost {
  readonly won: false;
  /** Some masters granted, not a majority: two waiters split the vote. */
  readonly split: boolean;
  /** Too few masters answered to tell: the error names those that did not. */
  readonly unreachable?: LockServerUnreachableError;
  /** When, from the holders' remaining ttls, a majority of masters will be free at the latest. */
  readonly freeInMs: number;
}

export type Vote = Won | Lost;

/** A renewal counted over the masters: a majority extended it, a majority refused it, or neither could be told. */
export type Renewal = 'renewed' | 'refused' | LockServerUnreachableError;

/**
 * The Redlock algorithm over the masters (see docs/redlock.md): one parallel round to acquire,
 * a write-back of the fence when the granting majority's counters disagree, a validity check
 * counted from the first request, and a release on every master after a lost vote.
 */
export class RedlockVotes {
  private readonly slots = new VoteSlots(VOTES_IN_FLIGHT);

  constructor(
    private readonly masters: RedlockMasters,
    /** `ttl * driftFactor + 2`: how far the masters' clocks may run ahead of ours over a lease. */
    readonly driftMs: (ttlMs: number) => number,
  ) {}

  /** As voteTo, resolving with the vote. */
  vote(key: string, entry: string, ttlMs: number, waiter: string, staleAfterMs: number, arrivedAt = 0, listed = false, lockDelayMs = 0): Promise<Vote> {
    return new Promise((resolve) => this.voteTo(key, entry, ttlMs, waiter, staleAfterMs, arrivedAt, listed, resolve, lockDelayMs));
  }

  /**
   * One attempt of `entry` (unique per server-side holder) on every master, its outcome handed
   * to `done`. `waiter`: this process's waiter id, to join the waiters of masters that refuse
   * ('' for a try-lock), in the order of `arrivedAt` (Date.now() of the entry's first vote).
   * `listed`: the waiter voted before, so masters may list it among their waiters; a won vote
   * then takes it off. A callback, not a promise, as RedlockMasters.roundTo. `lockDelayMs`: the
   * entry's lock-delay, 0 for none (see redlock-scripts.ts).
   */
  voteTo(key: string, entry: string, ttlMs: number, waiter: string, staleAfterMs: number, arrivedAt: number, listed: boolean, done: (vote: Vote) => void, lockDelayMs = 0): void {
    const slot = this.slots.take();
    const voteIn = (giveBack: () => void) => {
      const counted = (vote: Vote) => {
        giveBack();
        done(vote);
      };
      const connecting = this.masters.ready();
      // A first vote waits for a majority to connect: it must not spend its request timeout on that.
      const lease = leaseField(ttlMs, lockDelayMs);
      if (connecting) void connecting.then(() => this.voteNow(key, entry, ttlMs, lease, waiter, staleAfterMs, arrivedAt, listed, counted));
      else this.voteNow(key, entry, ttlMs, lease, waiter, staleAfterMs, arrivedAt, listed, counted);
    };
    // A free slot (the common case) votes at once.
    if (typeof slot === 'function') voteIn(slot);
    else void slot.then(voteIn);
  }

  private voteNow(key: string, entry: string, ttlMs: number, lease: string | number, waiter: string, staleAfterMs: number, arrivedAt: number, listed: boolean, done: (vote: Vote) => void): void {
    const { quorum, count } = this.masters;
    const sentAt = performance.now();
    const args = waiter ? [entry, lease, `${listed ? 1 : 0} ${waiter} ${Math.ceil(staleAfterMs)} ${arrivedAt}`] : [entry, lease];
    const decided = (so: readonly Answer<MasterVote>[]) => {
      const [granted, refused] = tallyVotes(so);
      return granted >= quorum || refused > count - quorum;
    };
    this.masters.roundTo(acquireScript, key, args, waiter ? 'acquire' : 'try to acquire', (live) => {
      // What decided the vote; `live` goes on collecting the masters that answer later.
      const answers = live.slice();
      const [granted, refused] = tallyVotes(answers);
      const lost = () => {
        // Refused everywhere: nothing of ours was set, the replies say so. Else take back what we got.
        if (refused < count) this.giveBack(key, entry, waiter);
        const unreachable =
          granted + refused < count && refused <= count - quorum
            ? new LockServerUnreachableError('redlock', `${waiter ? 'acquire' : 'try to acquire'} "${key}"`, this.masters.unanswered(answers), Math.round(performance.now() - sentAt), this.masters.firstError(answers))
            : undefined;
        done({ won: false, split: granted > 0, unreachable, freeInMs: freeIn(answers, quorum) });
      };
      if (granted < quorum) return lost();
      const fenced = (token: bigint | undefined) => {
        if (token === undefined || ttlMs - (performance.now() - sentAt) - this.driftMs(ttlMs) <= 0) return lost();
        // Masters that refused still list this process among their waiters: it waits no more.
        if (waiter && refused > 0) this.leave(key, waiter, answers.map((answer) => answer?.ok === true && typeof answer.value !== 'number'));
        done({ won: true, token, sentAt, answers: live });
      };
      const token = this.fence(key, entry, answers);
      if (typeof token === 'bigint') fenced(token);
      else void token.then(fenced);
    }, decided);
  }

  /**
   * The token of a majority grant: the highest counter among the granting masters. Before it
   * is handed out, a majority must hold a counter at least that high, so that any later majority
   * (which shares a master with it) counts above it: granting masters below it are raised (while
   * they still hold our entry). Undefined when that majority could not be made.
   */
  private fence(key: string, entry: string, answers: readonly Answer<MasterVote>[]): bigint | Promise<bigint | undefined> {
    let token = 0;
    for (const answer of answers) if (answer?.ok && typeof answer.value === 'number') token = Math.max(token, answer.value);
    const atOrAbove = answers.filter((answer) => answer?.ok && counterOf(answer.value) >= token).length;
    if (atOrAbove >= this.masters.quorum) return BigInt(token);
    const behind = answers.map((answer) => answer?.ok === true && typeof answer.value === 'number' && answer.value < token);
    return this.masters.round(raiseFenceScript, key, [entry, token], 'acquire', undefined, behind).then((raised) => {
      const confirmed = atOrAbove + raised.filter((answer) => answer?.ok && answer.value === 1).length;
      return confirmed >= this.masters.quorum ? BigInt(token) : undefined;
    });
  }

  /** Extends `entry` on every master; counts only with a majority, within the validity. */
  async renew(key: string, entry: string, ttlMs: number, lockDelayMs = 0): Promise<Renewal> {
    const { quorum, count } = this.masters;
    const sentAt = performance.now();
    const answers = await this.masters.round(
      renewScript,
      key,
      lockDelayMs > 0 ? [entry, ttlMs, Math.ceil(lockDelayMs)] : [entry, ttlMs],
      'renew',
      (so) => {
        const [renewed, refused] = tally(so);
        return renewed >= quorum || refused > count - quorum;
      },
      undefined,
      Math.min(this.masters.serverTimeoutMs, ttlMs),
    );
    const [renewed, refused] = tally(answers);
    if (refused > count - quorum) return 'refused';
    const waitedMs = Math.round(performance.now() - sentAt);
    if (renewed >= quorum && ttlMs - waitedMs - this.driftMs(ttlMs) > 0) return 'renewed';
    return new LockServerUnreachableError('redlock', `renew "${key}"`, this.masters.unanswered(answers), waitedMs, this.masters.firstError(answers));
  }

  /**
   * Owner-checked release on every master, raising each fence to `raiseTo` on the way (when
   * given). `done` gets an error (for the caller's warning) only when no majority confirmed it:
   * the rest expire with the ttl.
   */
  releaseTo(key: string, entry: string, raiseTo: bigint | undefined, done: (error?: Error) => void): void {
    const sentAt = performance.now();
    // Sent to every master; a paused minority does not keep the caller once a majority confirmed.
    const args = raiseTo === undefined ? [entry] : [entry, String(raiseTo)];
    this.masters.roundTo(releaseScript, key, args, 'release', (answers) => {
      if (this.confirmedByMajority(answers)) return done();
      done(new LockServerUnreachableError('redlock', `release "${key}"`, this.masters.unanswered(answers), Math.round(performance.now() - sentAt), this.masters.firstError(answers)));
    }, this.confirmedByMajority, undefined, this.masters.serverTimeoutMs);
  }

  private readonly confirmedByMajority = (answers: readonly Answer<unknown>[]): boolean => {
    let confirmed = 0;
    for (const answer of answers) if (answer?.ok) confirmed++;
    return confirmed >= this.masters.quorum;
  };

  /** After a lost vote or a withdrawal: release everywhere (owner-checked), and leave the waiters. */
  giveBack(key: string, entry: string, waiter: string): void {
    void this.masters.round(releaseScript, key, [entry, '', waiter], 'release', undefined, undefined, this.masters.serverTimeoutMs);
  }

  /** Leaves the waiters of `key` on every master (or the one `only` selects), passing on a word we cannot use. */
  leave(key: string, waiter: string, only?: readonly boolean[]): void {
    void this.masters.round(leaveScript, key, [waiter], 'leave the waiters of', undefined, only, this.masters.serverTimeoutMs);
  }
}

/** [granted, refused] among the acquire script's answers so far; errors and silence count as neither. */
function tallyVotes(answers: readonly Answer<MasterVote>[]): [number, number] {
  let granted = 0;
  let refused = 0;
  for (const answer of answers) {
    if (!answer?.ok) continue;
    if (typeof answer.value === 'number') granted++;
    else refused++;
  }
  return [granted, refused];
}

/** A master's fence counter as its vote reported it. */
function counterOf(vote: MasterVote): number {
  return typeof vote === 'number' ? vote : vote[1];
}

/**
 * The token to raise the masters' fences to at a release: the token when a master answered the
 * vote below it (it lagged), else none. The vote itself already left a majority at or above the
 * token (fence); raising a master that lagged at the release only spares a later vote the extra
 * round that would raise it then.
 */
export function fenceToRaise(vote: Pick<Won, 'token' | 'answers'>): bigint | undefined {
  const token = Number(vote.token);
  return vote.answers.some((answer) => answer?.ok && counterOf(answer.value) < token) ? vote.token : undefined;
}

/** [renewed, refused] among the renew script's answers so far; errors and silence count as neither. */
function tally(answers: readonly Answer<unknown>[]): [number, number] {
  let granted = 0;
  let refused = 0;
  for (const answer of answers) {
    if (!answer?.ok) continue;
    if (answer.value === 1) granted++;
    else refused++;
  }
  return [granted, refused];
}

/**
 * How long until a majority of masters is free at the latest: a granting master is free now, a
 * refusing one when its holder's key runs out (its PTTL), an unanswered one never (as far as we know).
 */
function freeIn(answers: readonly Answer<MasterVote>[], quorum: number): number {
  const frees = answers
    .map((answer) => {
      if (!answer?.ok) return Infinity;
      if (typeof answer.value === 'number') return 0;
      const pttl = answer.value[2] ?? 0;
      return pttl < 0 ? (pttl === -1 ? Infinity : 0) : pttl;
    })
    .sort((a, b) => a - b);
  return frees[quorum - 1];
}
