import { Logger } from '@nestjs/common';
import type { LockBackend, LockGrant } from './backends/lock-backend.interface';
import { deadlines, type Deadline } from './deadlines';
import { LockLostError, type LockLostReason } from './errors';
import { assertTtl } from './lock-options';

/**
 * Local clocks and the server's drift apart, and a grant arrives a little after the server
 * started its lease: the local deadline is taken this much early (Redlock's 1% + 2 ms).
 */
export function driftAllowanceMs(ttlMs: number): number {
  return ttlMs * 0.01 + 2;
}

const logger = new Logger('DistributedLock');

/**
 * The leases listening to each backend `lost` signal. Backends may share one signal among all
 * their grants (Redis aborts one at close()); EventTarget walks its list of listeners on every
 * add and remove, which with thousands of locks held would cost O(locks) per acquisition. One
 * listener per signal and a Set make joining and leaving O(1); a signal of one grant (memory,
 * etcd, ZooKeeper) keeps its one lease without a Set.
 */
interface Listening {
  one?: LockLease;
  many?: Set<LockLease>;
}
const leasesBySignal = new WeakMap<AbortSignal, Listening>();

function listenForLoss(lease: LockLease, signal: AbortSignal): void {
  let listening = leasesBySignal.get(signal);
  if (!listening) {
    const entry: Listening = {};
    leasesBySignal.set(signal, (listening = entry));
    signal.addEventListener(
      'abort',
      () => {
        const leases = entry.many ? [...entry.many] : entry.one ? [entry.one] : [];
        for (const each of leases) each.markLost('backend-reported', signal.reason);
      },
      { once: true },
    );
  }
  if (listening.many) listening.many.add(lease);
  else if (!listening.one) listening.one = lease;
  else {
    listening.many = new Set([listening.one, lease]);
    listening.one = undefined;
  }
}

function stopListening(lease: LockLease, signal: AbortSignal): void {
  const listening = leasesBySignal.get(signal);
  if (listening?.one === lease) listening.one = undefined;
  else listening?.many?.delete(lease);
}

/**
 * One granted lease in this process: renews it while held, keeps the local deadline it last
 * confirmed, fires the lost signal the moment the lease is known gone, and releases it once when
 * the last re-entrant holder leaves. LockHandle is the user's view of it.
 *
 * One deadline per lease (on the process's shared scheduler, see deadlines.ts), at whichever
 * comes first: the next renewal or the end of the lease.
 */
export class LockLease {
  private readonly lostController = new AbortController();
  private holds = 1;
  private deadline: number;
  /** When the next renewal is due; Infinity while none is (renew off, or one on its way). */
  private renewAt = Infinity;
  private timer?: Deadline;
  private released?: Promise<void>;
  private lostError?: LockLostError;

  constructor(
    private readonly backend: LockBackend,
    readonly grant: LockGrant,
    /** The name the user asked for, before prefix and hashing: what errors show. */
    readonly name: string,
    private ttlMs: number,
    private readonly renewIntervalMs: number | undefined,
    private readonly autoRenew: boolean,
    /** Told once, after the backend release, so the owner can stop tracking this lease. */
    private readonly onReleased: (lease: LockLease) => void,
  ) {
    // The server's lease started after the request was sent, never before: count from then.
    this.deadline = (grant.requestedAt ?? performance.now()) + ttlMs - driftAllowanceMs(ttlMs);
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
    if (autoRenew) this.renewAt = performance.now() + this.interval();
    this.arm();
    if (grant.lost.aborted) this.markLost('backend-reported', grant.lost.reason);
    else listenForLoss(this, grant.lost);
  }

  get signal(): AbortSignal {
    return this.lostController.signal;
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

  async extend(ttlMs = this.ttlMs): Promise<void> {
    assertTtl('ttlMs', ttlMs);
    this.assertHeld();
    const started = performance.now();
    if (!(await this.backend.renew(this.grant, ttlMs))) {
      this.markLost('renewal-refused');
      throw this.lostError!;
    }
    // Lost or released while the renewal was on its way: the renewal changes nothing for us.
    this.assertHeld();
    this.ttlMs = ttlMs;
    if (this.autoRenew) this.renewAt = performance.now() + this.interval();
    this.confirm(started, ttlMs);
  }

  markLost(reason: LockLostReason, cause?: unknown): void {
    if (this.lostError || this.released) return;
    this.stop();
    this.lostError = new LockLostError(this.name, this.grant.fencingToken, reason, { cause });
    this.lostController.abort(this.lostError);
    // Our own deadline passed: give the lock up at the backend too (owner-checked), so the next
    // waiter does not wait for a server-side lease that outlives ours (etcd's session, a ZK node).
    if (reason === 'lease-expired') this.backend.release(this.grant).catch(() => undefined);
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
    this.timer = deadlines.add(Math.min(this.renewAt, this.deadline), this.onTimer);
  }

  private readonly onTimer = (): void => {
    if (!this.isActive) return; // the deadline passed: isActive has fired the lost signal
    if (performance.now() >= this.renewAt) {
      this.renewAt = Infinity;
      void this.renewNow();
    }
    this.arm(); // the end of the lease meanwhile, or the next renewal
  };

  private async renewNow(): Promise<void> {
    const started = performance.now();
    // The ttl this renewal asks for: extend() may change this.ttlMs while it is on its way.
    const ttlMs = this.ttlMs;
    try {
      const stillOurs = await this.backend.renew(this.grant, ttlMs);
      if (!this.isActive) return;
      if (!stillOurs) return this.markLost('renewal-refused');
      this.renewAt = performance.now() + this.interval();
      this.confirm(started, ttlMs);
    } catch (error) {
      // Could not tell: keep trying until the lease last confirmed runs out.
      logger.warn(`Renewing lock "${this.name}" failed, retrying: ${(error as Error).message}`);
      if (!this.isActive) return;
      this.renewAt = performance.now() + Math.max(this.interval() / 3, 10);
      this.arm();
    }
  }

  /**
   * The lease was extended by a call that started at `started`: count from then, not from the
   * reply. `onlyLater`: a confirmation that may arrive after a renewal must not shorten it.
   */
  private confirm(started: number, ttlMs: number, onlyLater = false): void {
    const deadline = started + ttlMs - driftAllowanceMs(ttlMs);
    if (!onlyLater || deadline > this.deadline) this.deadline = deadline;
    this.arm();
  }

  private checkDeadline(): void {
    if (this.released === undefined && this.lostError === undefined && performance.now() >= this.deadline) {
      this.markLost('lease-expired');
    }
  }

  private stop(): void {
    deadlines.cancel(this.timer);
    stopListening(this, this.grant.lost);
  }

  private async releaseAtBackend(): Promise<void> {
    this.checkDeadline();
    const validForMs = this.lostError ? undefined : this.deadline - performance.now();
    let released: Promise<void>;
    try {
      released = this.backend.release(this.grant, validForMs);
    } catch (error) {
      released = Promise.reject(error);
    }
    this.stop(); // once the release is on its way: it need not wait for this
    try {
      await released;
    } catch (error) {
      // The lease runs out on its own; failing the caller's finished work would mislead it.
      logger.warn(`Releasing lock "${this.name}" failed; it expires with its lease: ${(error as Error).message}`);
    } finally {
      this.onReleased(this);
    }
  }
}
