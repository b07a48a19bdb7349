import type { EntryMode } from './lock-backend.interface';

/**
 * LockBackend.lockDelayRefusal of a backend that enforces a lock-delay for the exclusive lock
 * only: its read and permit holders keep their leases where its delay record does not reach.
 */
export function exclusiveLockDelayOnly(backend: string, mode: EntryMode): string | undefined {
  if (mode === 'write') return undefined;
  const what = mode === 'read' ? 'read locks' : 'semaphores';
  return `the ${backend} backend enforces a lock-delay for the exclusive lock only, not for ${what}; leave lockDelayMs at 0 for them (the memory backend has it for every kind).`;
}
