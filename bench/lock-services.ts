import { LockService, type LockBackend } from '../lib';
import { resolveModuleOptions } from '../lib/lock-options';

/**
 * A LockService over `backend` with the module's defaults, without a Nest container. Its shutdown
 * also closes the backend (the module leaves a custom backend open: it is the caller's).
 */
export function lockServiceOver(backend: LockBackend): LockService {
  const service = new LockService(backend, resolveModuleOptions({ backend: { type: 'custom', backend } }));
  const shutdown = service.onApplicationShutdown.bind(service);
  service.onApplicationShutdown = async () => {
    await shutdown();
    await backend.close();
  };
  return service;
}
