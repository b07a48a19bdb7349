import type { LockBackend } from './backends/lock-backend.interface';
import { deadlines } from './deadlines';
import { LockServerUnreachableError } from './errors';

/**
 * `call`, or LockServerUnreachableError once `timeoutMs` passes without an answer: a server that
 * is paused or black-holed never answers, and no call may wait on it past its bound. A result
 * that arrives later goes to `late` (a grant to give back).
 */
export function withinServerTimeout<T>(
  call: Promise<T>,
  /** Who the error names: the backend, or anything with its name and address. */
  backend: Pick<LockBackend, 'name' | 'address' | 'unreachable'>,
  operation: string,
  timeoutMs: number,
  late?: (value: T) => void,
): Promise<T> {
  return new Promise<T>((resolve, reject) => {
    let timedOut = false;
    const started = performance.now();
    // Kept alive: a caller waiting for the server is work in progress.
    const timer = deadlines.add(
      started + timeoutMs,
      () => {
        timedOut = true;
        const waitedMs = Math.round(performance.now() - started);
        reject(new LockServerUnreachableError(backend.name, operation, backend.address ?? backend.name, waitedMs, backend.unreachable?.()));
      },
      true,
    );
    call.then(
      (value) => {
        deadlines.cancel(timer);
        if (timedOut) late?.(value);
        else resolve(value);
      },
      (error) => {
        deadlines.cancel(timer);
        reject(error);
      },
    );
  });
}
