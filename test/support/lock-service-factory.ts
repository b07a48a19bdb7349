import { LockService, type DistributedLockModuleOptions, type LockBackend } from '../../lib';
import { resolveModuleOptions } from '../../lib/lock-options';

/** A LockService over `backend` without a Nest container: what the contract suite drives. */
export function lockServiceOver(backend: LockBackend, options: DistributedLockModuleOptions = {}): LockService {
  return new LockService(backend, resolveModuleOptions({ ...options, backend: { type: 'custom', backend } }));
}
