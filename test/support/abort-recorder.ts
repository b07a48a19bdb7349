import type { AbortWatcher } from '../../lib/shared-abort-listeners';

/** A watcher that records the reasons it is told, in order. */
export function abortRecorder(): AbortWatcher & { told: unknown[] } {
  const told: unknown[] = [];
  return { told, aborted: (reason) => void told.push(reason) };
}
