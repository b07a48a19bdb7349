import { DistributedLockError } from '../errors';

export type BackendState = 'open' | 'closed';

/**
 * Open until close(), then closed for good: the one place a backend asks whether it may still
 * take calls, and the errors its waiters and holders get when it closes.
 */
export class BackendLifecycle {
  private state: BackendState = 'open';

  constructor(private readonly backendName: string) {}

  get isOpen(): boolean {
    return this.state === 'open';
  }

  assertOpen(): void {
    if (this.state !== 'open') throw new DistributedLockError(`The ${this.backendName} lock backend is closed.`);
  }

  /** True only the first time: a backend's close work runs once. */
  beginClose(): boolean {
    if (this.state === 'closed') return false;
    this.state = 'closed';
    return true;
  }

  /** What a wait still pending at close rejects with. */
  closedWhileWaiting(): DistributedLockError {
    return new DistributedLockError(`The ${this.backendName} lock backend was closed while waiting.`);
  }

  /** What a held grant's lost signal fires with at close. */
  closedWhileHeld(): DistributedLockError {
    return new DistributedLockError(`The ${this.backendName} lock backend was closed while the lock was held.`);
  }
}
