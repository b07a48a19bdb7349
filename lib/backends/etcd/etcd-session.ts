import type { Etcd3, ILeaseKeepAliveResponse, Lease } from 'etcd3';
import { driftAllowanceMs } from '../../lock-lease';

/**
 * One process's session: an etcd lease kept alive by etcd3's keepalive stream (one request every
 * third of the ttl). Every lock key of the process is put with it, so when the process dies its
 * keys go with the lease.
 *
 * The session also keeps its own local deadline: the send time of the oldest keepalive that was
 * answered, plus the ttl the server granted, minus a drift allowance. etcd3 itself only gives up
 * at twice the ttl, long after the server dropped the keys; a holder must learn it lost its locks
 * before anyone else can be granted them, so `onLost` fires at that local deadline.
 */
export class EtcdSession {
  private lostReason?: Error;
  private deadline: number;
  private timer?: NodeJS.Timeout;
  /** performance.now() of keepalives sent and not yet answered, oldest first. */
  private sent: number[] = [];

  private constructor(
    private readonly lease: Lease,
    readonly leaseId: string,
    grantedAt: number,
    private readonly ttlSeconds: number,
    private readonly onLost: (session: EtcdSession, reason: Error) => void,
  ) {
    this.deadline = grantedAt + ttlSeconds * 1000 - driftAllowanceMs(ttlSeconds * 1000);
    this.arm();
    lease.on('keepaliveFired', () => this.sent.push(performance.now()));
    lease.on('keepaliveEstablished', () => (this.sent = []));
    lease.on('keepaliveFailed', () => (this.sent = []));
    lease.on('keepaliveSucceeded', (response: ILeaseKeepAliveResponse) => this.confirmed(response));
    lease.on('lost', (error: Error) => this.end(error));
  }

  /** Grants the lease (one round trip) and starts its keepalive stream. */
  static async open(client: Etcd3, ttlSeconds: number, onLost: (session: EtcdSession, reason: Error) => void): Promise<EtcdSession> {
    const grantedAt = performance.now();
    const lease = client.lease(ttlSeconds);
    const leaseId = await lease.grant();
    return new EtcdSession(lease, leaseId, grantedAt, ttlSeconds, onLost);
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
    clearTimeout(this.timer);
    this.lease.release();
    this.onLost(this, reason);
  }

  /**
   * Deletes the session and every key put with it, at once rather than when the ttl runs out.
   * Best effort: if it fails the keys still expire with the lease, whose keepalives have stopped.
   */
  async revoke(timeoutMs: number): Promise<void> {
    this.end(new Error('the session was closed'));
    let timer: NodeJS.Timeout | undefined;
    // The deadline bounds the call; the timer also bounds a client that was closed under us.
    const gaveUp = new Promise<void>((resolve) => (timer = setTimeout(resolve, timeoutMs)));
    await Promise.race([this.lease.revoke({ deadline: Date.now() + timeoutMs }).catch(() => undefined), gaveUp]);
    clearTimeout(timer);
  }

  private confirmed(response: ILeaseKeepAliveResponse): void {
    const sentAt = this.sent.shift();
    if (sentAt === undefined || this.lostReason) return;
    const ttlMs = Number(response.TTL) * 1000;
    this.deadline = Math.max(this.deadline, sentAt + ttlMs - driftAllowanceMs(ttlMs));
    this.arm();
  }

  private arm(): void {
    clearTimeout(this.timer);
    // Timers can fire a little early (libuv's cached loop time): re-arm until the deadline is
    // due, or a session that stops hearing from etcd would never be declared lost.
    this.timer = setTimeout(() => this.alive && this.arm(), Math.max(0, this.deadline - performance.now()));
    this.timer.unref();
  }

  private checkDeadline(): void {
    if (this.lostReason !== undefined || performance.now() < this.deadline) return;
    this.end(new Error(`the session lease (${this.ttlSeconds} s) ran out with no keepalive answered: etcd has dropped its keys`));
  }
}
