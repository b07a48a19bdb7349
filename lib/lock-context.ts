import { AsyncLocalStorage } from 'node:async_hooks';
import type { LockHandle } from './lock-handle';

/**
 * The locks the current async call chain holds, innermost first. Immutable: entering a lock
 * makes a new scope for the callback, so two siblings started with Promise.all inside a lock
 * both inherit it, but a lock one sibling takes is never seen by the other.
 *
 * Each entry names the LockService that took it: two services in one process (two apps, or
 * two backends) are two lock domains, and a lock held through one is not re-entered through
 * the other.
 */
export class LockScope {
  private constructor(
    private readonly parent: LockScope | undefined,
    private readonly service: object,
    private readonly key: string,
    private readonly handle: LockHandle,
    /** What currentLock() shows for this entry: the handle of several names that `handle` is part of, if any. */
    private readonly shown: LockHandle,
  ) {}

  static with(parent: LockScope | undefined, service: object, key: string, handle: LockHandle): LockScope {
    return new LockScope(parent, service, key, handle, handle);
  }

  /** `parent` with each name of a handle of several names: each re-enterable by its key, currentLock() the whole. */
  static withEach(parent: LockScope | undefined, service: object, whole: LockHandle): LockScope | undefined {
    let scope = parent;
    for (const part of whole.parts!) if (!part.reentrant) scope = new LockScope(scope, service, part.lease.grant.key, part, whole);
    return scope;
  }

  /** The chain's handle for `key` taken through `service` (the outermost one), if the lock is still held. */
  find(service: object, key: string): LockHandle | undefined {
    for (let scope: LockScope | undefined = this; scope; scope = scope.parent) {
      if (scope.key === key && scope.service === service) return scope.handle.lease.isActive ? scope.handle : undefined;
    }
    return undefined;
  }

  /** The lock entered last in this chain and not released yet (it may have been lost: see its signal). */
  get innermost(): LockHandle | undefined {
    for (let scope: LockScope | undefined = this; scope; scope = scope.parent) {
      if (!scope.handle.lease.isReleased) return scope.shown;
    }
    return undefined;
  }
}

/** The one AsyncLocalStorage of held locks, shared by every LockService in the process. */
export const lockContext = new AsyncLocalStorage<LockScope>();

/** Calls of runInScope whose lock has not begun its release yet, across every LockService. */
let openScopes = 0;
/** Calls of runInScope so far: the idle check tells a busy process from an idle one by it, leftScope a young one from a warm one. */
let entered = 0;
let idleCheck: NodeJS.Timeout | undefined;

/**
 * How long no lock scope must have been open or entered before the storage is disabled. In a warm
 * process, enabling and disabling cost more than the hooks of one lock's promises, so a process
 * taking lock after lock keeps the storage on; one that stopped taking locks turns the hooks off
 * for the rest of its promises.
 */
export const IDLE_DISABLE_MS = 1_000;

/**
 * For its first locks a process disables the storage as each lock's release begins instead: until
 * V8 has optimized Node's hook functions, running them for every promise costs more than turning
 * them off and on. A short-lived process (a cron job, a CLI) takes only such locks.
 */
export const YOUNG_PROCESS_SCOPES = 250;

/** Calls of runInScope in this process so far. */
export function lockScopesEntered(): number {
  return entered;
}

/** `fn(handle)` inside `scope`; the caller calls leftScope as the lock's release begins. */
export function runInScope<T>(scope: LockScope | undefined, fn: (handle: LockHandle) => T, handle: LockHandle): T {
  openScopes++;
  entered++;
  return lockContext.run(scope!, fn, handle);
}

/**
 * A scope's lock is being released (its release starts right after). With no scope open, every
 * store that async resources still carry holds only released locks, which find() and innermost
 * skip, so nothing can tell the storage is off: once no scope has been open or entered for
 * IDLE_DISABLE_MS (at once in a young process), it is disabled, which stops Node's promise hooks
 * (an enabled AsyncLocalStorage runs them for every promise of the process) until the next lock
 * is entered (run() enables it).
 */
export function leftScope(): void {
  if (--openScopes !== 0) return;
  if (entered <= YOUNG_PROCESS_SCOPES) lockContext.disable();
  else if (!idleCheck) armIdleCheck(entered);
}

function armIdleCheck(enteredAtArming: number): void {
  idleCheck = setTimeout(() => {
    idleCheck = undefined;
    if (openScopes > 0) return; // the last scope to leave arms it again
    if (entered === enteredAtArming) lockContext.disable();
    else armIdleCheck(entered);
  }, IDLE_DISABLE_MS);
  idleCheck.unref();
}

/**
 * The lock the calling code entered last (through @WithLock or withLock) and still holds, e.g.
 * to send its fencing token with a write or to pass its `signal` to a long operation. A lock
 * that was lost is still returned, with its signal aborted; one released (a child that outlived
 * its parent's lock) is not.
 */
export function currentLock(): LockHandle | undefined {
  return lockContext.getStore()?.innermost;
}
