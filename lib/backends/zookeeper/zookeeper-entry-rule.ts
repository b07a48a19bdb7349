import { LockConfigError } from '../../errors';
import { mayGo } from '../entry-rule';
import type { AcquireRequest } from '../lock-backend.interface';
import type { QueueEntry } from './zookeeper-paths';

/**
 * The entries whose departure may grant the entry at `at` of `queue` (sorted by sequence);
 * none: it holds now. Entries only ever join behind, so what is ahead can only shrink:
 * - write: the one just ahead (it holds once alone at the head, as Curator's mutex);
 * - read: the nearest write entry ahead, the only one whose going can leave no write ahead;
 * - permit: the `limit` entries just ahead, since any of them going may leave fewer than
 *   `limit` ahead, while an entry further ahead going leaves those `limit` still ahead.
 */
export function blockersOf(queue: readonly QueueEntry[], at: number): readonly QueueEntry[] {
  const entry = queue[at];
  if (entry.mode === 'write') return at === 0 ? [] : [queue[at - 1]];
  if (entry.mode === 'read') {
    for (let ahead = at - 1; ahead >= 0; ahead--) if (queue[ahead].mode === 'write') return [queue[ahead]];
    return [];
  }
  return at < entry.limit! ? [] : queue.slice(at - entry.limit!, at);
}

/** The entries that hold now, in queue order: each one's rule met by the entries ahead of it. */
export function holdersOf(queue: readonly QueueEntry[]): QueueEntry[] {
  const holders: QueueEntry[] = [];
  let writesAhead = 0;
  queue.forEach((entry, at) => {
    if (mayGo(entry.mode, entry.limit ?? 1, at, writesAhead)) holders.push(entry);
    if (entry.mode === 'write') writesAhead++;
  });
  return holders;
}

/** A permit ahead of the entry at `at` whose semaphore's limit is not `limit`, if any. */
export function otherLimitAhead(queue: readonly QueueEntry[], at: number, limit: number): QueueEntry | undefined {
  for (let ahead = 0; ahead < at; ahead++) if (queue[ahead].mode === 'permit' && queue[ahead].limit !== limit) return queue[ahead];
  return undefined;
}

/** Permits of one name must agree on the semaphore's limit. */
export function limitMismatch(key: string, limit: number, otherLimit: number): LockConfigError {
  return new LockConfigError(
    'limit',
    `the semaphore ${JSON.stringify(key)} is held or queued for with limit ${otherLimit}, and this permit asks for limit ${limit}; every permit of a key must give the same limit.`,
  );
}

/** A permit needs its semaphore's limit, a positive integer: refused before any I/O. */
export function invalidLimit(request: Pick<AcquireRequest, 'key' | 'mode' | 'limit'>): LockConfigError | undefined {
  if (request.mode !== 'permit') return undefined;
  const { limit } = request;
  if (typeof limit === 'number' && Number.isSafeInteger(limit) && limit >= 1) return undefined;
  return new LockConfigError('limit', `a permit of ${JSON.stringify(request.key)} needs the semaphore's limit, a positive integer; got ${String(limit)}.`);
}
