import { LockService, type DistributedLockModuleOptions, type LockBackend } from '../../lib';
import { createBackend } from '../../lib/backends/registry';
import { backendSettings, resolveModuleOptions } from '../../lib/lock-options';

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

/**
 * The backend and LockService that `DistributedLockModule.forRoot(options)` builds (the backend
 * follows the module's ttlMs and serverTimeoutMs), without a Nest container. Stop it with
 * `service.onApplicationShutdown()`, which closes the backend.
 */
export async function moduleLikeService(options: DistributedLockModuleOptions): Promise<{ service: LockService; backend: LockBackend }> {
  const resolved = resolveModuleOptions(options);
  const backend = await createBackend(resolved.backend, backendSettings(resolved));
  return { service: new LockService(backend, resolved), backend };
}
