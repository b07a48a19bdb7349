import type { AcquireRequest, EntryMode, LockGrant } from '../backends/lock-backend.interface';
import type { PendingWait } from './pending-wait';

/**
 * Bits of a fencing token left for the turn within a batch: the token of the n-th caller served
 * under one server entry is `(entry token << 16) + n`. Strictly increasing across processes as
 * long as the server's entry tokens are: an entry granted later has a higher token, and within
 * a batch n grows. A batch takes at most 2^16 callers, so a token stays inside a signed 64-bit
 * column while entry tokens stay below 2^47.
 */
export const TURN_BITS = 16n;
const BATCH_LIMIT = 2 ** Number(TURN_BITS);

/** The fencing token of turn `turn` under an entry whose server token is `entryToken`. */
export function batchToken(entryToken: bigint, turn: bigint): bigint {
  return (entryToken << TURN_BITS) + turn;
}

/** One caller of this process waiting for one name. */
export interface QueuedCaller {
  readonly request: AcquireRequest;
  readonly wait: PendingWait<LockGrant>;
}

/**
 * open: taking callers, nothing sent yet; sending: the entry is being put at the server;
 * queued: the entry waits in the server's queue; holding: the entry holds the lock; ended.
 */
export type BatchState = 'open' | 'sending' | 'queued' | 'holding' | 'ended';

/**
 * Callers of this process queued behind one server-side entry for one name, all of one mode. The
 * callers that arrive before the entry is sent share it: a write entry serves them one after the
 * other while it holds, a read entry all at once (readers of one process never wait for each
 * other); a permit entry is one of the semaphore's places, so it takes a single caller. A burst of
 * a thousand writers or readers costs one entry put and one removed. Backends extend it with what
 * their entry needs (keys, session, lease).
 */
export class Batch {
  state: BatchState = 'open';
  /** The entry's kind at the server; set by LocalQueues from the first caller's request. */
  mode: EntryMode = 'write';
  /** For a permit entry: the semaphore's limit. */
  limit?: number;
  /** The entry's lock-delay (AcquireRequest.lockDelayMs), 0 for none: callers with another delay put another entry. */
  lockDelayMs = 0;
  private readonly callers: QueuedCaller[] = [];
  private joined = 0;
  private served = 0;
  /** The token of the first turn under the entry whose token is `baseOf`: made once per entry. */
  private baseToken = 0n;
  private baseOf?: bigint;
  /** The server's fencing token for this batch's entry, once it holds. */
  entryToken?: bigint;
  /** The owners served now: at most one, except under a read entry. */
  readonly holders = new Set<string>();
  /**
   * Set by LocalQueues for the first caller of a name, whose abort it listens for only once the
   * batch turns out to wait (see AcquireRequest.signal: most such callers are granted at once).
   */
  listenLater?: () => void;
  /**
   * The entry went out with the batch's first caller (LocalQueues' sendFirstAtOnce) in this turn
   * of LocalQueues' late joins: callers of the same turn still join it, as they would have joined
   * it before it went out. -1: never.
   */
  lateJoinsIn = -1;

  constructor(
    /** The full key (module keyPrefix + resolved name, hashed when long): the server-side queue. */
    readonly key: string,
    /** Unique within the process: backends use it to name the entry. */
    readonly id: string,
  ) {}

  get full(): boolean {
    return this.joined >= (this.mode === 'permit' ? 1 : BATCH_LIMIT);
  }

  /** A caller asking for `request` may share this batch's entry (same kind, room left). */
  fits(request: Pick<AcquireRequest, 'mode' | 'limit' | 'lockDelayMs'>): boolean {
    return (request.mode ?? 'write') === this.mode && request.limit === this.limit && (request.lockDelayMs ?? 0) === this.lockDelayMs && !this.full;
  }

  /** The first owner served now, if any (the only one outside read entries). */
  get holder(): string | undefined {
    for (const owner of this.holders) return owner;
    return undefined;
  }

  add(caller: QueuedCaller): void {
    this.callers.push(caller);
    this.joined++;
  }

  /** Some caller still waits. */
  get hasCallers(): boolean {
    return this.peek() !== undefined;
  }

  /** The next caller still waiting, left on the batch. */
  peek(): QueuedCaller | undefined {
    const callers = this.callers;
    for (let i = 0; i < callers.length; i++) if (!callers[i].wait.isSettled) return callers[i];
    return undefined;
  }

  /** The next caller still waiting, taken off the batch. */
  next(): QueuedCaller | undefined {
    for (let caller = this.callers.shift(); caller; caller = this.callers.shift()) if (!caller.wait.isSettled) return caller;
    return undefined;
  }

  /** The next turn's fencing token. A lone caller's is the base itself: no BigInt is made for it. */
  token(): bigint {
    const entryToken = this.entryToken!;
    if (this.baseOf !== entryToken) {
      this.baseOf = entryToken;
      this.baseToken = batchToken(entryToken, 0n);
    }
    const turn = this.served++;
    return turn === 0 ? this.baseToken : this.baseToken + BigInt(turn);
  }

  /** The entry is gone and the batch puts a new one: turns count from 0 again under it. */
  newEntry(): void {
    this.entryToken = undefined;
    this.served = 0;
  }

  /** Ends every wait still pending with `error`. */
  rejectAll(error: unknown): void {
    for (const caller of this.callers.splice(0)) caller.wait.reject(error);
  }
}
