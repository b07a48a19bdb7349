import type { EntryMode, LockBackend } from './backends/lock-backend.interface';
import { LockConfigError } from './errors';

/**
 * A lock-delay asked of a backend that cannot enforce it at its server fails before any I/O: a
 * delay kept only by the clients would be broken by the very crash or pause it is for.
 */
export function assertBackendDelays(backend: LockBackend, mode: EntryMode = 'write'): void {
  const refusal = backend.lockDelayRefusal?.(mode);
  if (refusal) throw new LockConfigError('lockDelayMs', refusal);
  if (backend.lockDelay) return;
  throw new LockConfigError(
    'lockDelayMs',
      `the ${backend.name} backend does not enforce a lock-delay; leave lockDelayMs at 0, or choose memory, redis, redlock, etcd, zookeeper or postgres ` +
        '(a custom backend that enforces it at its server sets LockBackend.lockDelay).',
  );
}
