import { PendingWait } from '../../queue/pending-wait';
import { ZkCode, zkCode } from './zookeeper-client';
import { ZooKeeperSessionLostError } from './zookeeper-session';

/**
 * Restart the acquisition from the top (a new node, on a live session): the session died, or
 * our node vanished. Anything else a call rejects with is a real failure for the caller.
 */
export class AttemptAgain extends Error {}

export function isRetryable(error: unknown): boolean {
  const code = zkCode(error);
  return (
    error instanceof AttemptAgain ||
    error instanceof ZooKeeperSessionLostError ||
    code === ZkCode.CONNECTION_LOSS ||
    code === ZkCode.SESSION_EXPIRED
  );
}

/**
 * Repeats a call that failed with CONNECTION_LOSS (its reply was lost when the connection
 * dropped; the client reconnects and queues the repeat). Only for calls that are safe to repeat.
 * A session that dies meanwhile rejects the call with ZooKeeperSessionLostError, which ends this.
 */
export async function repeatOnConnectionLoss<T>(call: () => Promise<T>): Promise<T> {
  for (;;) {
    try {
      return await call();
    } catch (error) {
      if (zkCode(error) !== ZkCode.CONNECTION_LOSS) throw error;
    }
  }
}

/** Waits `ms`, or less if `signal` aborts (then rejects with its reason, its timer cleared). */
export function pause(ms: number, signal: AbortSignal): Promise<void> {
  if (signal.aborted) return Promise.reject(signal.reason);
  const wait = new PendingWait<void>();
  const timer = setTimeout(() => wait.resolve(), ms);
  wait.listen(signal, () => clearTimeout(timer));
  return wait.promise;
}
