import type { Etcd3, Lease } from 'etcd3';

/**
 * etcd revokes expired leases in a loop every 500 ms: the session's keys may go that much after
 * its lease ran out, and the delay is counted from then.
 */
const REVOKE_LOOP_MS = 500;

/**
 * The leases behind a session's lock-delay keys (etcd-keys.ts), one per delay length: the
 * session's ttl plus the delay (rounded up to whole seconds, after allowing for the revoke loop).
 * They have no keepalive stream of their own: each is kept alive right after a keepalive of the
 * session's lease is answered, so on the server's clock it always ends at least the delay after
 * the session's lease. A process that dies stops both; the delay key outlives the lock key by the
 * delay, and no waiter is granted while it exists.
 */
export class DelayLeases {
  private readonly leases = new Map<number, { readonly lease: Lease; readonly id: Promise<string> }>();

  constructor(
    private readonly client: Etcd3,
    /** The session lease's ttl as etcd granted it (it may raise what was asked). */
    private readonly sessionTtlSeconds: () => number,
  ) {}

  /** The id of the lease for keys of a lock-delay of `lockDelayMs`, granted on first use (one round trip). */
  leaseId(lockDelayMs: number): Promise<string> {
    const extraSeconds = Math.ceil((lockDelayMs + REVOKE_LOOP_MS) / 1000);
    const known = this.leases.get(extraSeconds);
    if (known) return known.id;
    const lease = this.client.lease(this.sessionTtlSeconds() + extraSeconds, { autoKeepAlive: false });
    const forget = () => {
      if (this.leases.get(extraSeconds)?.lease === lease) this.leases.delete(extraSeconds);
    };
    // A lease etcd no longer has: the next grant asks for a new one.
    lease.on('lost', forget);
    const id = lease.grant();
    id.catch(forget);
    this.leases.set(extraSeconds, { lease, id });
    return id;
  }

  /** Called once the session's keepalive sent before this was answered. Best effort: the next one tries again. */
  keepAlive(deadline: number): void {
    for (const { lease } of this.leases.values()) lease.keepaliveOnce({ deadline }).catch(() => undefined);
  }

  /** The session ended: its delay keys run out on the server, as a dead process's would. */
  release(): void {
    for (const { lease } of this.leases.values()) lease.release();
    this.leases.clear();
  }

  /** The session was closed on purpose: its delay keys go with it. */
  async revoke(deadline: number): Promise<void> {
    const leases = [...this.leases.values()];
    this.leases.clear();
    await Promise.all(leases.map(({ lease }) => lease.revoke({ deadline }).catch(() => undefined)));
  }
}
