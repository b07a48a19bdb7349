import { LockService, type DistributedLockModuleOptions, type LockBackend } from '../../lib';
import { resolveModuleOptions } from '../../lib/lock-options';

/**
 * A LockService over `backend` without a Nest container: what the contract suite drives. Its
 * shutdown also closes the backend, as the module does for the backends it builds.
 */
export function lockServiceOver(backend: LockBackend, options: DistributedLockModuleOptions = {}): LockService {
  const service = new LockService(backend, resolveModuleOptions({ ...options, backend: { type: 'custom', backend } }));
  const shutdown = service.onApplicationShutdown.bind(service);
  service.onApplicationShutdown = async () => {
    await shutdown();
    await backend.close();
  };
  return service;
}
