import type { AcquireRequest, LockGrant } from '../lock-backend.interface';

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
  private onAbort?: () => void;

  constructor(
    readonly key: string,
    readonly owner: string,
    readonly ttlMs: number,
    private readonly request: AcquireRequest,
    private readonly events: WaiterEvents,
    private readonly resolve: (grant: LockGrant) => void,
    private readonly reject: (reason: unknown) => void,
  ) {}

  /**
   * Queued at the server: from now on the caller's giving up takes it out of the queue. The
   * request's signal is looked at only now (see AcquireRequest.signal). False when the caller
   * had already given up: the waiter is settled and leaving.
   */
  listenForAbort(): boolean {
    const signal = this.request.signal;
    if (signal.aborted) {
      this.abort();
      return false;
    }
    this.onAbort = () => this.abort();
    signal.addEventListener('abort', this.onAbort, { once: true });
    return true;
  }

  settle(grant: LockGrant | undefined, error?: unknown): void {
    if (!this.events.settled(this, grant !== undefined)) return;
    // Only a waiter that listened looks at the signal again: one granted at once never makes it.
    if (this.onAbort) this.request.signal.removeEventListener('abort', this.onAbort);
    if (grant) this.resolve(grant);
    else this.reject(error);
  }

  private abort(): void {
    this.settle(undefined, this.request.signal.reason);
    this.events.abandoned(this);
  }
}
