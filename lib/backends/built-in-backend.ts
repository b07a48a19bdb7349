import type { AbortWatcher } from '../shared-abort-listeners';
import type { AcquireRequest, LockBackend } from './lock-backend.interface';

/**
 * What the built-in backends tell the core beyond LockBackend, so that it skips work a backend
 * already does; internal, never part of the contract a custom backend implements.
 */
export interface BuiltInBackend extends LockBackend {
  /**
   * release's promise settles within the module's serverTimeoutMs whatever the server does: the
   * core awaits it with no timer of its own, unless the lease ends sooner.
   */
  readonly boundedRelease?: boolean;
}

/** The core's acquire requests: they also tell a watcher of their stop without making an AbortSignal. */
export interface StoppableRequest extends AcquireRequest {
  /** Tells `watcher` once, with the reason, when the caller stops waiting: what `signal` says. */
  onStop(watcher: AbortWatcher): void;
}

/** True for the core's own requests (see StoppableRequest). */
export function isStoppable(request: AcquireRequest): request is StoppableRequest {
  return typeof (request as Partial<StoppableRequest>).onStop === 'function';
}
