/**
 * How fast the server's clock may run apart from ours: NTP slews a clock by at most 500 ppm, and
 * a free-running crystal is within about 100 ppm.
 */
const MAX_DRIFT = 5e-4;

/**
 * An upper bound of how far a server's clock (Redis TIME, PostgreSQL clock_timestamp(), in ms) is
 * ahead of this process's performance.now(). A reply that carries the server's time T to a request sent at local time s
 * was made after s, so the offset is at most T - s (+1 ms: TIME is read to the millisecond
 * below). The smallest such sample is the tightest bound, widened by the drift since it was
 * taken. A time the server gives then maps to a local time no later than when it happened:
 * see RedisLockBackend.grantLate and PostgresLockBackend.notified, which count a pushed grant's
 * lease from there.
 */
export class ServerClock {
  private offsetMs = Infinity;
  private sampledAt = 0;

  /** A reply with the server's time `serverMs` to a request sent at `sentAt`. */
  sample(serverMs: number, sentAt: number): void {
    const offset = serverMs + 1 - sentAt;
    if (offset < this.bound(sentAt)) {
      this.offsetMs = offset;
      this.sampledAt = sentAt;
    }
  }

  /**
   * The earliest local time (performance.now()) at which the server's clock can have read
   * `serverMs`; -Infinity before any sample.
   */
  earliestLocal(serverMs: number): number {
    return serverMs - this.bound(performance.now());
  }

  private bound(at: number): number {
    return this.offsetMs + Math.abs(at - this.sampledAt) * MAX_DRIFT;
  }
}
