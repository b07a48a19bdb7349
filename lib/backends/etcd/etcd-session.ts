import type { Etcd3, ILeaseKeepAliveResponse, Lease } from 'etcd3';
import { deadlines, type Deadline } from '../../deadlines';
import { driftAllowanceMs } from '../../lock-defaults';
import type { EtcdCalls } from './etcd-calls';
import { DelayLeases } from './etcd-delay-leases';
import { lockKeys, type LockKeys } from './etcd-keys';
import { EntrySlots } from './entry-slots';

/** A keepalive probe goes out when no keepalive sent in this fraction of the ttl was answered. */
const PROBE_AFTER_TTL = 0.4;
/** Each probe's deadline, as a fraction of the ttl: about six rounds fit before the deadline. */
const PROBE_TIMEOUT_TTL = 0.1;
/**
 * Keepalives sent at once per probe round, each to a member etcd3 picks at random: with one
 * stalled member of three, a round fails with a chance of 1/9 rather than 1/3.
 */
const PROBES_PER_ROUND = 2;

/**
 * One process's session: an etcd lease kept alive by etcd3's keepalive stream (one request every
 * third of the ttl). Every lock key of the process is put with it, so when the process dies its
 * keys go with the lease.
 *
 * The session also keeps its own local deadline: the send time of the newest keepalive that was
 * answered, plus the ttl the server granted, minus a drift allowance. etcd3 itself only gives up
 * at twice the ttl, long after the server dropped the keys; a holder must learn it lost its locks
 * before anyone else can be granted them, so `onLost` fires at that local deadline. A stream that
 * goes quiet is backed by keepalive probes through any member (see armProbe).
 */
export class EtcdSession {
  private lostReason?: Error;
  private deadline: number;
  /** Both on the process's deadline scheduler, which never runs one before it is due. */
  private timer?: Deadline;
  private probeTimer?: Deadline;
  /** performance.now() of keepalives sent and not yet answered, oldest first. */
  private sent: number[] = [];
  /** performance.now() when the newest keepalive etcd answered (or the grant) was sent. */
  private confirmedSentAt: number;
  private readonly slots = new EntrySlots();
  /** The ttl etcd granted the session lease (it may raise what was asked): what delay leases add to. */
  private grantedTtlSeconds: number;
  private readonly delayLeases: DelayLeases;

  private constructor(
    client: Etcd3,
    private readonly lease: Lease,
    readonly leaseId: string,
    grantedAt: number,
    private readonly ttlSeconds: number,
    private readonly onLost: (session: EtcdSession, reason: Error) => void,
    /** Told of each keepalive's outcome: it says whether etcd can be reached. */
    private readonly calls: EtcdCalls,
  ) {
    this.deadline = grantedAt + ttlSeconds * 1000 - driftAllowanceMs(ttlSeconds * 1000);
    this.confirmedSentAt = grantedAt;
    this.grantedTtlSeconds = ttlSeconds;
    this.delayLeases = new DelayLeases(client, () => this.grantedTtlSeconds);
    this.arm();
    this.armProbe();
    lease.on('keepaliveFired', () => this.sent.push(performance.now()));
    lease.on('keepaliveEstablished', () => (this.sent = []));
    lease.on('keepaliveFailed', (error: unknown) => {
      this.sent = [];
      calls.failed(error);
    });
    lease.on('keepaliveSucceeded', (response: ILeaseKeepAliveResponse) => this.streamAnswered(response));
    lease.on('lost', (error: Error) => this.end(error));
  }

  /**
   * Grants the lease (one round trip) and starts its keepalive stream. `grantDeadline`: for a
   * client with no deadlines of its own (a user's), the grant's, or it could wait forever.
   */
  static async open(
    client: Etcd3,
    ttlSeconds: number,
    onLost: (session: EtcdSession, reason: Error) => void,
    calls: EtcdCalls,
    grantDeadline?: { deadline: number },
  ): Promise<EtcdSession> {
    const grantedAt = performance.now();
    const lease = client.lease(ttlSeconds, grantDeadline);
    // A lease whose grant failed must not linger: etcd3 would report it 'lost' later, unheard.
    lease.on('lost', () => undefined);
    let leaseId: string;
    try {
      leaseId = await calls.track(lease.grant());
    } catch (error) {
      lease.release();
      throw error;
    }
    calls.reached();
    return new EtcdSession(client, lease, leaseId, grantedAt, ttlSeconds, onLost, calls);
  }

  /** The keys of a new entry of this session under `name`, named by a reused slot (EntrySlots); with its delay key for a lock-delay. */
  entryKeys(name: string, lockDelayMs = 0): LockKeys {
    const slot = this.slots.take(name);
    return lockKeys(name, this.leaseId, String(slot.number), slot, lockDelayMs);
  }

  /** The lease a lock-delay key of this session is put with (DelayLeases). */
  delayLeaseId(lockDelayMs: number): Promise<string> {
    return this.calls.track(this.delayLeases.leaseId(lockDelayMs));
  }

  /** Not ended, and its local deadline not passed (checked now, in case timers ran late). */
  get alive(): boolean {
    this.checkDeadline();
    return this.lostReason === undefined;
  }

  get reason(): Error | undefined {
    return this.lostReason;
  }

  /** Marks the session gone, stops its keepalives and tells the backend, once. */
  end(reason: Error): void {
    if (this.lostReason) return;
    this.lostReason = reason;
    deadlines.cancel(this.timer);
    deadlines.cancel(this.probeTimer);
    this.lease.release();
    this.delayLeases.release();
    this.onLost(this, reason);
  }

  /**
   * Deletes the session and every key put with it, at once rather than when the ttl runs out.
   * Best effort: if it fails the keys still expire with the lease, whose keepalives have stopped.
   */
  async revoke(timeoutMs: number): Promise<void> {
    const delays = this.delayLeases.revoke(Date.now() + timeoutMs);
    this.end(new Error('the session was closed'));
    let timer: NodeJS.Timeout | undefined;
    // The deadline bounds the call; the timer also bounds a client that was closed under us.
    const gaveUp = new Promise<void>((resolve) => (timer = setTimeout(resolve, timeoutMs)));
    const revoked = Promise.all([this.lease.revoke({ deadline: Date.now() + timeoutMs }).catch(() => undefined), delays]);
    await Promise.race([revoked, gaveUp]);
    clearTimeout(timer);
  }

  private streamAnswered(response: ILeaseKeepAliveResponse): void {
    const sentAt = this.sent.shift();
    if (sentAt !== undefined) this.confirmed(sentAt, response);
  }

  /** etcd answered a keepalive sent at `sentAt`: the lease runs its ttl from then at least. */
  private confirmed(sentAt: number, response: ILeaseKeepAliveResponse): void {
    if (this.lostReason) return;
    this.calls.reached();
    const ttlMs = Number(response.TTL) * 1000;
    if (ttlMs > 0) this.grantedTtlSeconds = Math.max(this.ttlSeconds, ttlMs / 1000);
    this.deadline = Math.max(this.deadline, sentAt + ttlMs - driftAllowanceMs(ttlMs));
    this.confirmedSentAt = Math.max(this.confirmedSentAt, sentAt);
    // After the session's keepalive was answered: a delay lease's countdown restarts later than the session's.
    this.delayLeases.keepAlive(Date.now() + this.ttlSeconds * 1000 * PROBE_TIMEOUT_TTL);
    this.arm();
    this.armProbe();
  }

  /**
   * The keepalive stream sends every third of the ttl and is answered within milliseconds. When
   * the member carrying it stalls (a paused process, a half-open connection) it neither answers
   * nor errors, and etcd3 reconnects it only after a whole ttl of silence, past the session's
   * deadline: every lock of the process would be lost while the cluster is healthy. So once no
   * keepalive sent in the last 0.4 ttl has been answered, a round of probes goes out: keepalives
   * on streams of their own (etcd3's keepaliveOnce, each to a member picked at random), with a
   * deadline of a tenth of the ttl, and again until one is answered or the session ends. Any
   * member forwards a keepalive to the leader, so a live member confirms the lease.
   */
  private armProbe(): void {
    this.probeAt(this.probeDueAt());
  }

  private probeDueAt(): number {
    return this.confirmedSentAt + this.ttlSeconds * 1000 * PROBE_AFTER_TTL;
  }

  private probeAt(at: number): void {
    deadlines.cancel(this.probeTimer);
    this.probeTimer = deadlines.add(at, () => void this.probe());
  }

  private async probe(): Promise<void> {
    if (!this.alive) return;
    // A retry after a failed round may come due after a keepalive was answered meanwhile.
    if (performance.now() < this.probeDueAt()) return this.armProbe();
    const timeoutMs = this.ttlSeconds * 1000 * PROBE_TIMEOUT_TTL;
    const sentAt = performance.now();
    try {
      const deadline = Date.now() + timeoutMs;
      const probes = Array.from({ length: PROBES_PER_ROUND }, () => this.lease.keepaliveOnce({ deadline }));
      this.confirmed(sentAt, await Promise.any(probes));
    } catch (error) {
      this.calls.failed(error instanceof AggregateError ? error.errors[0] : error);
      // A lease etcd no longer has is reported through 'lost' (keepaliveOnce emits it). Anything
      // else: try again, no sooner than one probe deadline after this one started.
      if (this.alive) this.probeAt(sentAt + timeoutMs);
    }
  }

  private arm(): void {
    deadlines.cancel(this.timer);
    this.timer = deadlines.add(this.deadline, () => this.checkDeadline());
  }

  private checkDeadline(): void {
    if (this.lostReason !== undefined || performance.now() < this.deadline) return;
    this.end(new SessionRanOut(this.ttlSeconds, Math.round(performance.now() - this.confirmedSentAt)));
  }
}

/** The session's local deadline passed with no keepalive answered: etcd could not be reached. */
export class SessionRanOut extends Error {
  constructor(
    ttlSeconds: number,
    /** Since the newest keepalive etcd answered was sent. */
    readonly silentMs: number,
  ) {
    super(`the session lease (${ttlSeconds} s) ran out with no keepalive answered: etcd has dropped its keys`);
  }
}
