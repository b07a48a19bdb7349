import type { EntryMode, LockBackend } from './backends/lock-backend.interface';
import { LockConfigError, LockModeError } from './errors';

/**
 * Whether a chain holding `held` may enter the same name again in `requested` with no backend
 * call: the same mode, or read inside write (the writer excludes everyone else already).
 */
export function covers(held: EntryMode, requested: EntryMode): boolean {
  return held === requested || (held === 'write' && requested === 'read');
}

/** Throws LockModeError when a chain holding `held` asks for `requested` (see covers). */
export function assertCovers(name: string, held: EntryMode, requested: EntryMode): void {
  if (!covers(held, requested)) throw new LockModeError(name, held, requested);
}

/** A read lock or a semaphore on a backend that grants only the exclusive lock fails before any I/O. */
export function assertBackendGrants(backend: LockBackend, mode: EntryMode): void {
  if (mode === 'write' || backend.modes?.includes(mode)) return;
  const refusal = backend.modeRefusal?.(mode);
  if (refusal) throw new LockConfigError('backend', refusal);
  const what = mode === 'read' ? "mode: 'read'" : 'semaphores';
  throw new LockConfigError(
    'backend',
    `the ${backend.name} backend does not offer ${what}; choose memory, redis, etcd, zookeeper or postgres for them ` +
      '(a custom backend lists the modes it grants in LockBackend.modes).',
  );
}
