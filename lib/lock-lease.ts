import { Logger } from '@nestjs/common';
import type { BuiltInBackend } from './backends/built-in-backend';
import type { EntryMode, LockBackend, LockGrant } from './backends/lock-backend.interface';
import { deadlines, type Deadline } from './deadlines';
import { lockChannels, type LostMessage, type ReleasedMessage } from './diagnostics/lock-channels';
import { DistributedLockError, LockLostError, LockServerUnreachableError, type LockLostReason } from './errors';
import { driftAllowanceMs } from './lock-defaults';
import { assertTtl } from './lock-options';
import { withinServerTimeout } from './server-timeout';
import { unwatchGrantLoss, watchGrantLoss } from './grant-loss';
import type { AbortWatcher } from './shared-abort-listeners';

/**
 * Local clocks and the server's drift apart, and a grant arrives a little after the server
 * started its lease: the local deadline is taken this much early (Redlock's 1% + 2 ms).
 */

const logger = new Logger('DistributedLock');

/**
 * One granted lease in this process: renews it while held, keeps the local deadline it last
 * confirmed, fires the lost signal the moment the lease is known gone, and releases it once when
 * the last re-entrant holder leaves. LockHandle is the user's view of it.
 *
 * One deadline per lease (on the process's shared scheduler, see deadlines.ts), at whichever
 * comes first: the next renewal or the end of the lease.
 */
export class LockLease implements AbortWatcher {
  /** Made when a caller first asks for the signal: most locks end with nobody having asked. */
  private lostController?: AbortController;
  private holds = 1;
  private deadline: number;
  /** When the next renewal is due; Infinity while none is (renew off, or one on its way). */
  private renewAt = Infinity;
  private timer?: Deadline;
  private released?: Promise<void>;
  private lostError?: LockLostError;
  /** The error of the last renewal that could not reach the server; cleared by one that could. */
  private renewFailure?: unknown;
  /** When the renewal on its way was sent; undefined when none is. */
  private renewingSince?: number;
  /** When to warn that the renewal on its way has no answer yet (once per outage, as a failure). */
  private warnAt = Infinity;
  /** Set by drain() at shutdown: renewals stop, and the lease ends with the holder or its deadline. */
  private drained?: { promise: Promise<void>; resolve: () => void };
  /** When the grant reached this process: hold times count from here. */
  private readonly grantedAt: number;

  constructor(
    private readonly backend: LockBackend,
    readonly grant: LockGrant,
    /** The name the user asked for, before prefix and hashing: what errors show. */
    readonly name: string,
    private ttlMs: number,
    private readonly renewIntervalMs: number | undefined,
    private readonly autoRenew: boolean,
    /** How long a renewal or release may wait for the server (the module's serverTimeoutMs). */
    private readonly serverTimeoutMs: number,
    /** Told once, after the backend release, so the owner can stop tracking this lease. */
    private readonly onReleased: (lease: LockLease) => void,
    /** The entry's mode: what a re-entrant acquisition in the same chain may ask for (see lock-mode.ts). */
    readonly mode: EntryMode = 'write',
    /** The grant's lock-delay (0: none): see markLost. */
    private readonly lockDelayMs = 0,
  ) {
    const now = (this.grantedAt = performance.now());
    // The server's lease started after the request was sent, never before: count from then.
    this.deadline = (grant.requestedAt ?? now) + ttlMs - this.driftMs(ttlMs);
    const provisional = grant.provisional;
    if (provisional) {
      // Handed over before the server recorded us: the previous holder's lease covers us until then.
      this.deadline = Math.min(this.deadline, provisional.validUntil);
      void provisional.recorded.then((from) => {
        if (!this.isActive) return;
        if (from === undefined) this.markLost('backend-reported', new Error('the server refused the hand-over to this holder'));
        else this.confirm(from, this.ttlMs, true);
      });
    }
    if (autoRenew) this.renewAt = nextRenewal(this.interval(), now);
    this.arm();
    watchGrantLoss(grant, this);
  }

  get signal(): AbortSignal {
    if (!this.lostController) {
      this.lostController = new AbortController();
      if (this.lostError) this.lostController.abort(this.lostError);
    }
    return this.lostController.signal;
  }

  /** How long ago the grant reached this process. */
  get heldMs(): number {
    return performance.now() - this.grantedAt;
  }

  /** The last holder left and the lock was given back (or is being). */
  get isReleased(): boolean {
    return this.released !== undefined;
  }

  /** Held and not known lost; checks the deadline too, in case timers were late (a paused process). */
  get isActive(): boolean {
    this.checkDeadline();
    return this.released === undefined && this.lostError === undefined;
  }

  /** The error a caller gets when it finishes after the lock was lost, if it was. */
  get lost(): LockLostError | undefined {
    this.checkDeadline();
    return this.lostError;
  }

  enter(): void {
    this.holds++;
  }

  /** Releases at the backend when the outermost holder leaves; never rejects. */
  exit(): Promise<void> {
    if (--this.holds > 0) return Promise.resolve();
    this.released ??= this.releaseAtBackend();
    return this.released;
  }

  /**
   * Shutdown: no more renewals. Resolves once the holder has released the lock, or once the
   * lease ran out (the holder is then told its lock was lost, and the lock is released).
   */
  drain(): Promise<void> {
    if (this.released) return this.released;
    if (this.lostError) return (this.released = this.releaseAtBackend());
    if (!this.drained) {
      let resolve!: () => void;
      const promise = new Promise<void>((done) => (resolve = done));
      this.drained = { promise, resolve };
      this.renewAt = Infinity;
      this.arm();
    }
    return this.drained.promise;
  }

  async extend(ttlMs = this.ttlMs): Promise<void> {
    assertTtl('ttlMs', ttlMs);
    this.assertHeld();
    const started = performance.now();
    const stillOurs = await withinServerTimeout(this.backend.renew(this.grant, ttlMs), this.backend, `extend "${this.name}"`, this.serverTimeoutMs);
    if (this.released) {
      // Released while the renewal was on its way: the refusal says nothing about a loss.
      throw new DistributedLockError(`Lock "${this.name}" was released while extend() was on its way; acquire it again.`);
    }
    if (!stillOurs) {
      this.markLost('renewal-refused');
      throw this.lostError!;
    }
    // Lost or released while the renewal was on its way: the renewal changes nothing for us.
    this.assertHeld();
    this.ttlMs = ttlMs;
    if (this.autoRenew) this.renewAt = nextRenewal(this.interval());
    this.confirm(started, ttlMs);
  }

  /**
   * The backend says the lease is gone. When the server could not be reached (the backend says
   * so, or our renewals have been failing), that is the reason the user needs to hear: a
   * session that expired because no keepalive got through is an unreachable server.
   */
  reportedLost(cause: unknown): void {
    const unreachable = cause instanceof LockServerUnreachableError || this.renewFailure !== undefined;
    this.markLost(unreachable ? 'server-unreachable' : 'backend-reported', cause);
  }

  /** AbortWatcher: the backend's lost signal for this grant fired. */
  aborted(reason: unknown): void {
    this.reportedLost(reason);
  }

  markLost(reason: LockLostReason, cause?: unknown): void {
    if (this.lostError || this.released) return;
    this.stop();
    this.lostError = new LockLostError(this.name, this.grant.fencingToken, reason, { cause });
    if (lockChannels.lost.hasSubscribers) {
      const { name, grant } = this;
      lockChannels.lost.publish({ name, backend: this.backend.name, mode: this.mode, fencingToken: grant.fencingToken, reason, heldMs: performance.now() - this.grantedAt } satisfies LostMessage);
    }
    this.lostController?.abort(this.lostError);
    // Drained at shutdown: release now, once, and let shutdown go on when that is done.
    if (this.drained) this.released = this.releaseAtBackend();
    // Our own deadline passed: give the lock up at the backend too (owner-checked), so the next
    // waiter does not wait for a server-side lease that outlives ours (etcd's session, a ZK node).
    // Not with a lock-delay: the handler may still run, and the delay after the server's expiry
    // is what the user asked for to let it stop; a release would hand the name on at once.
    else if (this.lockDelayMs === 0 && (reason === 'lease-expired' || reason === 'server-unreachable')) this.backend.release(this.grant).catch(() => undefined);
  }

  private assertHeld(): void {
    const lost = this.lost;
    if (lost || this.released) throw lost ?? new LockLostError(this.name, this.grant.fencingToken, 'renewal-refused');
  }

  private interval(): number {
    return this.renewIntervalMs !== undefined && this.renewIntervalMs < this.ttlMs ? this.renewIntervalMs : this.ttlMs / 3;
  }

  private arm(): void {
    deadlines.cancel(this.timer);
    // Kept alive while shutdown waits on this lease: the process must not exit under it.
    this.timer = deadlines.add(Math.min(this.renewAt, this.deadline, this.warnAt), this.onTimer, this.drained !== undefined);
  }

  private readonly onTimer = (): void => {
    if (!this.isActive) return; // the deadline passed: isActive has fired the lost signal
    const now = performance.now();
    if (now >= this.warnAt) {
      this.warnAt = Infinity;
      this.warnUnanswered(now);
    }
    if (now >= this.renewAt) {
      this.renewAt = Infinity;
      void this.renewNow();
    }
    this.arm(); // the end of the lease meanwhile, the next renewal, or the warning
  };

  private async renewNow(): Promise<void> {
    const started = (this.renewingSince = performance.now());
    // A server that neither answers nor fails before the lease ends (paused, cut off, serverTimeoutMs
    // above ttlMs) is warned of halfway through what is left, not only after the loss.
    if (this.renewFailure === undefined) this.warnAt = started + Math.min(this.serverTimeoutMs, (this.deadline - started) / 2);
    // The ttl this renewal asks for: extend() may change this.ttlMs while it is on its way.
    const ttlMs = this.ttlMs;
    try {
      const stillOurs = await withinServerTimeout(this.backend.renew(this.grant, ttlMs), this.backend, `renew "${this.name}"`, this.serverTimeoutMs);
      this.renewingSince = undefined;
      this.warnAt = Infinity;
      if (!this.isActive) return;
      if (!stillOurs) return this.markLost('renewal-refused');
      if (this.renewFailure !== undefined) logger.log(`Renewing lock "${this.name}" works again.`);
      this.renewFailure = undefined;
      this.renewAt = nextRenewal(this.interval());
      this.confirm(started, ttlMs);
    } catch (error) {
      this.renewingSince = undefined;
      this.warnAt = Infinity;
      // Could not tell: keep trying until the lease last confirmed runs out. Warned once per outage.
      if (this.renewFailure === undefined) {
        const leftMs = Math.max(0, Math.round(this.deadline - performance.now()));
        logger.warn(`Renewing lock "${this.name}" failed; retrying until its lease ends in ${leftMs} ms: ${(error as Error).message}`);
      }
      this.renewFailure = error;
      if (!this.isActive) return;
      // At shutdown no renewal is due any more.
      this.renewAt = this.drained ? Infinity : performance.now() + Math.max(this.interval() / 3, 10);
      this.arm();
    }
  }

  /**
   * The lease was extended by a call that started at `started`: count from then, not from the
   * reply. `onlyLater`: a confirmation that may arrive after a renewal must not shorten it.
   */
  private confirm(started: number, ttlMs: number, onlyLater = false): void {
    const deadline = started + ttlMs - this.driftMs(ttlMs);
    if (!onlyLater || deadline > this.deadline) this.deadline = deadline;
    this.arm();
  }

  /** The library's allowance, or the backend's when it allows more (Redlock's driftFactor). */
  private driftMs(ttlMs: number): number {
    return Math.max(driftAllowanceMs(ttlMs), this.backend.driftAllowanceMs?.(ttlMs) ?? 0);
  }

  /** The renewal on its way has had no answer for a while: the first sign of an outage the user sees. */
  private warnUnanswered(now: number): void {
    const waitedMs = Math.round(now - this.renewingSince!);
    const leftMs = Math.max(0, Math.round(this.deadline - now));
    this.renewFailure = new Error(`no answer to a renewal for ${waitedMs} ms`);
    logger.warn(`Renewing lock "${this.name}" has had no answer from the ${this.backend.name} server for ${waitedMs} ms; the lease ends in ${leftMs} ms unless it answers.`);
  }

  private checkDeadline(now = performance.now()): void {
    if (this.released === undefined && this.lostError === undefined && now >= this.deadline) {
      if (this.drained) this.markLost('backend-closed');
      else if (this.renewFailure !== undefined) this.markLost('server-unreachable', this.renewFailure);
      else if (this.unansweredRenewal(now)) this.markLost('server-unreachable', new Error(`no answer to the renewal sent ${Math.round(this.deadline - this.renewingSince!)} ms before the lease ended`));
      else this.markLost('lease-expired');
    }
  }

  /**
   * A renewal was on its way when the lease ended, and the server had longer to answer it than
   * this process was late to notice the end: the server, not a paused process, let the lease go.
   */
  private unansweredRenewal(now: number): boolean {
    return this.renewingSince !== undefined && now - this.deadline < this.deadline - this.renewingSince;
  }

  private stop(): void {
    deadlines.cancel(this.timer);
    unwatchGrantLoss(this.grant, this);
  }

  /**
   * Never keeps the caller past the lease: it waits for the server at most until the lease's
   * local deadline (and serverTimeoutMs), then lets the release finish in the background. Two
   * promises, not an async chain: this is on every lock's path.
   */
  private releaseAtBackend(): Promise<void> {
    const now = performance.now();
    this.checkDeadline(now);
    const validForMs = this.lostError ? undefined : this.deadline - now;
    let released: Promise<void>;
    try {
      released = this.backend.release(this.grant, validForMs);
    } catch (error) {
      released = Promise.reject(error);
    }
    this.stop(); // once the release is on its way: it need not wait for this
    if (lockChannels.released.hasSubscribers) {
      const { name, grant } = this;
      const heldMs = performance.now() - this.grantedAt;
      lockChannels.released.publish({ name, backend: this.backend.name, mode: this.mode, fencingToken: grant.fencingToken, heldMs, wasLost: this.lostError !== undefined } satisfies ReleasedMessage);
    }
    let callerWait: { resolve: () => void; timer: Deadline } | undefined;
    const settled = (): void => {
      this.onReleased(this);
      this.drained?.resolve();
      if (callerWait) {
        deadlines.cancel(callerWait.timer);
        callerWait.resolve();
      }
    };
    const answered = released.then(settled, (error) => {
      // The lease runs out on its own; failing the caller's finished work would mislead it.
      logger.warn(`Releasing lock "${this.name}" failed; it expires with its lease: ${(error as Error).message}`);
      settled();
    });
    const waitMs = Math.min(validForMs ?? 0, this.serverTimeoutMs);
    if (!(waitMs > 0)) return RESOLVED;
    // The backend answers within serverTimeoutMs, and the lease lasts longer: no timer of ours.
    if (waitMs === this.serverTimeoutMs && (this.backend as BuiltInBackend).boundedRelease) return answered;
    // Kept alive: the caller waits for the server, until the answer or waitMs, whichever is first.
    return new Promise<void>((resolve) => (callerWait = { resolve, timer: deadlines.add(performance.now() + waitMs, resolve, true) }));
  }
}

const RESOLVED: Promise<void> = Promise.resolve();

/**
 * When a lease renewed now renews next: one interval from now, moved earlier onto a grid of an
 * eighth of the interval that every lease of the process shares. Leases with the same interval
 * then come due together, in one firing of the deadline timer, and a backend can renew them in
 * one request (Redis, etcd and ZooKeeper do); each renews at most an eighth of an interval early.
 */
export function nextRenewal(intervalMs: number, now = performance.now()): number {
  const step = intervalMs / 8;
  return Math.floor((now + intervalMs) / step) * step;
}
