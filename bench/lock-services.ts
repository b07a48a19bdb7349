import { LockService, type LockBackend } from '../lib';
import { resolveModuleOptions } from '../lib/lock-options';

/** A LockService over `backend` with the module's defaults, without a Nest container. */
export function lockServiceOver(backend: LockBackend): LockService {
  return new LockService(backend, resolveModuleOptions({ backend: { type: 'custom', backend } }));
}
