import { DistributedLockError } from '../../errors';
import type { AcquireRequest, LockBackend, LockGrant } from '../lock-backend.interface';
import { MemoryLockStore, type MemoryWaiter } from './memory-lock-store';

/**
 * The embedded default: a real backend with the distributed backends' semantics inside one
 * process. Several clients may share one store, which is how tests model several processes.
 */
export class MemoryLockBackend implements LockBackend {
  readonly name = 'memory';
  readonly maxKeyBytes = 1024;
  private readonly waiting = new Set<{ waiter: MemoryWaiter; reject: (reason: unknown) => void }>();
  private readonly held = new Map<string, LockGrant>();
  private closed = false;

  constructor(private readonly store = new MemoryLockStore()) {}

  async acquire(request: AcquireRequest): Promise<LockGrant> {
    this.assertOpen();
    const { key, owner, ttlMs } = request;
    return new Promise<LockGrant>((resolve, reject) => {
      const entry = {
        waiter: {
          owner,
          ttlMs,
          cancelled: false,
          onGrant: (grant: LockGrant) => {
            settle();
            resolve(this.track(grant));
          },
        },
        reject,
      };
      const onAbort = () => {
        entry.waiter.cancelled = true;
        settle();
        reject(signal.reason);
      };
      const settle = () => {
        this.waiting.delete(entry);
        signal.removeEventListener('abort', onAbort);
      };
      const grant = this.store.take(key, owner, ttlMs, entry.waiter);
      if (grant) return resolve(this.track(grant));
      // Looked at only once queued: a lock granted at once never needs it (see AcquireRequest.signal).
      const signal = request.signal;
      if (signal.aborted) return onAbort();
      this.waiting.add(entry);
      signal.addEventListener('abort', onAbort, { once: true });
    });
  }

  async tryAcquire({ key, owner, ttlMs }: Omit<AcquireRequest, 'signal'>): Promise<LockGrant | null> {
    this.assertOpen();
    const grant = this.store.take(key, owner, ttlMs);
    return grant && this.track(grant);
  }

  async renew(grant: LockGrant, ttlMs: number): Promise<boolean> {
    return !this.closed && this.store.renew(grant.key, grant.owner, ttlMs);
  }

  async release(grant: LockGrant): Promise<void> {
    this.held.delete(grant.owner);
    this.store.release(grant.key, grant.owner);
  }

  async close(): Promise<void> {
    this.closed = true;
    const closedError = new DistributedLockError('The memory lock backend was closed while waiting.');
    for (const { waiter, reject } of this.waiting) {
      waiter.cancelled = true;
      reject(closedError);
    }
    this.waiting.clear();
    const heldError = new DistributedLockError('The memory lock backend was closed while the lock was held.');
    for (const grant of this.held.values()) this.store.revoke(grant.key, grant.owner, heldError);
    this.held.clear();
  }

  private track(grant: LockGrant): LockGrant {
    this.held.set(grant.owner, grant);
    return grant;
  }

  private assertOpen(): void {
    if (this.closed) throw new DistributedLockError('The memory lock backend is closed.');
  }
}
