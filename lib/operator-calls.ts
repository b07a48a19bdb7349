import type { LockBackend } from './backends/lock-backend.interface';
import { DistributedLockError, LockBackendError, LockConfigError } from './errors';
import { withinServerTimeout } from './server-timeout';

/** A backend without the operator's call (a custom one) fails before any I/O, saying what to implement. */
export function assertOperatorCall(backend: LockBackend, method: 'inspect' | 'forceRelease'): void {
  if (typeof backend[method] === 'function') return;
  throw new LockConfigError(
    'backend',
    `the ${backend.name} backend has no ${method}(), which LockService.${method} needs: a custom backend implements LockBackend.${method} for it (every built-in backend has it).`,
  );
}

/** One operator's call at the server, bounded by serverTimeoutMs like a renewal or a release; client errors wrapped once. */
export async function operatorCall<T>(backend: LockBackend, operation: string, call: () => Promise<T>, serverTimeoutMs: number): Promise<T> {
  let answer: Promise<T>;
  try {
    answer = call();
  } catch (error) {
    answer = Promise.reject(error);
  }
  try {
    return await withinServerTimeout(answer, backend, operation, serverTimeoutMs);
  } catch (error) {
    throw error instanceof DistributedLockError ? error : new LockBackendError(backend.name, operation, error, backend.address);
  }
}
