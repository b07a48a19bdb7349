import type { LockBackend } from './lock-backend.interface';

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
