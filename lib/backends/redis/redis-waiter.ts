import type { AcquireRequest, LockGrant } from '../lock-backend.interface';
import { PendingWait } from '../pending-wait';

/** What the backend does when one of its waiters stops waiting. */
export interface WaiterEvents {
  /** The waiter is done (granted, or not): forget it. False when it already was, so it settles once. */
  settled(waiter: RedisWaiter, granted: boolean): boolean;
  /** The caller gave up after the waiter had queued: leave the queue at the server. */
  abandoned(waiter: RedisWaiter): void;
}

/**
 * One caller of this process waiting for a Redis lock: its place in the queue, and how its
 * acquire promise ends. A class rather than closures, because one is made per acquisition.
 */
export class RedisWaiter {
  /** The fence it will hold the lock with, known once the acquire script queued it. */
  fence?: string;
  /** A grant that came late is being confirmed with the server (see RedisLockBackend.grantLate). */
  confirming = false;
  /** The acquire script's reply came (granted, or queued). */
  answered = false;
  /** Before the acquire script was sent: no grant of this waiter can have started earlier. */
  readonly askedAt = performance.now();
  private readonly wait = new PendingWait<LockGrant>();

  constructor(
    readonly key: string,
    readonly owner: string,
    readonly ttlMs: number,
    private readonly request: AcquireRequest,
    private readonly events: WaiterEvents,
  ) {}

  get promise(): Promise<LockGrant> {
    return this.wait.promise;
  }

  /**
   * Queued at the server: from now on the caller's giving up takes it out of the queue. The
   * request's signal is looked at only now (see AcquireRequest.signal). False when the caller
   * had already given up: the waiter is settled and leaving.
   */
  listenForAbort(): boolean {
    return this.wait.listen(this.request.signal, () => {
      this.events.settled(this, false);
      this.events.abandoned(this);
    });
  }

  settle(grant: LockGrant | undefined, error?: unknown): void {
    if (!this.events.settled(this, grant !== undefined)) return;
    if (grant) this.wait.resolve(grant);
    else this.wait.reject(error);
  }
}
