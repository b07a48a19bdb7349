import type { AcquireRequest, EntryMode, LockBackend, LockGrant, LockInspection } from '../lock-backend.interface';
import { BackendLifecycle } from '../backend-lifecycle';
import { PendingWait } from '../../queue/pending-wait';
import { MemoryLockStore, type MemoryEntry } from './memory-lock-store';

/**
 * The embedded default: a real backend with the distributed backends' semantics inside one
 * process. Several clients may share one store, which is how tests model several processes.
 */
export class MemoryLockBackend implements LockBackend {
  readonly name = 'memory';
  readonly maxKeyBytes = 1024;
  readonly modes: readonly EntryMode[] = ['write', 'read', 'permit'];
  private readonly lifecycle = new BackendLifecycle('memory');
  private readonly waiting = new Set<{ waiter: MemoryEntry; wait: PendingWait<LockGrant> }>();
  private readonly held = new Map<string, LockGrant>();

  constructor(private readonly store = new MemoryLockStore()) {}

  async acquire(request: AcquireRequest): Promise<LockGrant> {
    this.lifecycle.assertOpen();
    const { key, owner, ttlMs, mode = 'write', limit = 1 } = request;
    const wait = new PendingWait<LockGrant>();
    const entry = {
      wait,
      waiter: {
        owner,
        mode,
        limit,
        ttlMs,
        cancelled: false,
        onGrant: (grant: LockGrant) => {
          this.waiting.delete(entry);
          wait.resolve(this.track(grant));
        },
      },
    };
    const grant = this.store.take(key, entry.waiter);
    if (grant) return this.track(grant);
    this.waiting.add(entry);
    wait.listen(request.signal, () => {
      entry.waiter.cancelled = true;
      this.waiting.delete(entry);
    });
    return wait.promise;
  }

  async tryAcquire({ key, owner, ttlMs, mode = 'write', limit = 1 }: Omit<AcquireRequest, 'signal'>): Promise<LockGrant | null> {
    this.lifecycle.assertOpen();
    const grant = this.store.take(key, { owner, mode, limit, ttlMs, cancelled: false });
    return grant && this.track(grant);
  }

  /** In process: only closed is unhealthy. */
  async ping(): Promise<void> {
    this.lifecycle.assertOpen();
  }

  async inspect(key: string): Promise<LockInspection> {
    this.lifecycle.assertOpen();
    return this.store.inspect(key);
  }

  async forceRelease(key: string): Promise<boolean> {
    this.lifecycle.assertOpen();
    return this.store.forceRelease(key);
  }

  async renew(grant: LockGrant, ttlMs: number): Promise<boolean> {
    return this.lifecycle.isOpen && this.store.renew(grant.key, grant.owner, ttlMs);
  }

  async release(grant: LockGrant): Promise<void> {
    this.held.delete(grant.owner);
    this.store.release(grant.key, grant.owner);
  }

  async close(): Promise<void> {
    if (!this.lifecycle.beginClose()) return;
    const closedError = this.lifecycle.closedWhileWaiting();
    for (const { waiter, wait } of this.waiting) {
      waiter.cancelled = true;
      wait.reject(closedError);
    }
    this.waiting.clear();
    const heldError = this.lifecycle.closedWhileHeld();
    for (const grant of this.held.values()) this.store.revoke(grant.key, grant.owner, heldError);
    this.held.clear();
  }

  private track(grant: LockGrant): LockGrant {
    this.held.set(grant.owner, grant);
    return grant;
  }
}
