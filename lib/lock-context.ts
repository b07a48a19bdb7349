import { AsyncLocalStorage } from 'node:async_hooks';
import type { LockHandle } from './lock-handle';

/**
 * The locks the current async call chain holds, innermost first. Immutable: entering a lock
 * makes a new scope for the callback, so two siblings started with Promise.all inside a lock
 * both inherit it, but a lock one sibling takes is never seen by the other.
 */
export class LockScope {
  private constructor(
    private readonly parent: LockScope | undefined,
    private readonly key: string,
    private readonly handle: LockHandle,
  ) {}

  static with(parent: LockScope | undefined, key: string, handle: LockHandle): LockScope {
    return new LockScope(parent, key, handle);
  }

  /** The chain's handle for `key` (the outermost one), if the lock is still held. */
  find(key: string): LockHandle | undefined {
    for (let scope: LockScope | undefined = this; scope; scope = scope.parent) {
      if (scope.key === key) return scope.handle.lease.isActive ? scope.handle : undefined;
    }
    return undefined;
  }

  /** The lock entered last in this chain. */
  get innermost(): LockHandle {
    return this.handle;
  }
}

/** The one AsyncLocalStorage of held locks, shared by every LockService in the process. */
export const lockContext = new AsyncLocalStorage<LockScope>();

/**
 * The lock the calling code entered last (through @WithLock or withLock), e.g. to send its
 * fencing token with a write or to pass its `signal` to a long operation.
 */
export function currentLock(): LockHandle | undefined {
  return lockContext.getStore()?.innermost;
}
