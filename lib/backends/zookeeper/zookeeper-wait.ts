import { PendingWait } from '../../queue/pending-wait';
import { NODE_DELETED, ZkCode, zkCode } from './zookeeper-client';
import type { OwnNodeWatch } from './zookeeper-own-node';
import { ZooKeeperSessionLostError, type ZooKeeperSession } from './zookeeper-session';

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

/**
 * Waits for the first change of any of `paths`, the entries that block ours (blockersOf): true
 * when one was deleted (or was already gone), false on any other change worth a fresh look
 * (another watch event, a lost connection). Rejects with AttemptAgain when our own node is
 * deleted first, with the signal's reason when `stop` aborts, or when the session dies.
 */
export function blockerDeleted(session: ZooKeeperSession, paths: readonly string[], own: OwnNodeWatch, stop: AbortSignal): Promise<boolean> {
  const wait = new PendingWait<boolean>();
  const stopHearingDeath = session.onDeath((reason) => wait.reject(reason));
  const stopHearingGone = own.onGone((reason) => wait.reject(new AttemptAgain(reason.message)));
  const watches = paths.map((path) => session.watch(path, (event) => wait.resolve(event.getType() === NODE_DELETED)));
  for (const watch of watches) {
    watch.set.then(
      (exists) => exists || wait.resolve(true),
      (error: unknown) => (zkCode(error) === ZkCode.CONNECTION_LOSS ? wait.resolve(false) : wait.reject(error)),
    );
  }
  wait.listen(stop);
  const cleanup = () => {
    stopHearingDeath();
    stopHearingGone();
    for (const watch of watches) watch.cancel();
  };
  wait.promise.then(cleanup, cleanup);
  return wait.promise;
}
