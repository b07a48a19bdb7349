import { randomBytes } from 'node:crypto';
import type { Redis } from 'ioredis';
import { ownerValue } from '../lib/backends/redis/redis-commands';
import { lockKeys } from '../lib/backends/redis/redis-keys';
import { acquireShortScript, releaseShortScript } from '../lib/backends/redis/redis-lock-scripts';
import { beginLifeScript, LIFE_KEY } from '../lib/backends/redis/server-life-scripts';
import { deadlines } from '../lib/deadlines';
import { LazyAbort } from '../lib/lazy-abort';
import { withinServerTimeout } from '../lib/server-timeout';
import { grantingKeys } from './redis-command-floors';
import { LeanScope } from './lean-scope';
import type { LockRunner } from './workloads';

const SERVER_TIMEOUT_MS = 5_000;

/**
 * The least an uncontended cycle over this library's Redis scripts must do to keep the lock's
 * basic promises, written as lean as it goes on a plain ioredis client: a unique owner, each call
 * bounded as the library bounds one (withinServerTimeout), the fencing token, a lease deadline
 * that fires a lazily made lost signal, the holder recorded, re-entrancy in the async chain. No
 * queue of the process's own callers, no renewals, no waiting, no reconnection checks: a yardstick
 * for the library's own layer, not a lock to use (it refuses to wait).
 */
export function leanRedisLock(client: Redis, address: string, ttlMs: number, waitMs: number): LockRunner {
  const ownerPrefix = `${randomBytes(12).toString('base64url')}:`;
  let ownerSeq = 0;
  const held = new Map<string, { key: string; fencingToken: number; loss: LazyAbort }>();
  const scope = new LeanScope();
  const server = { name: 'redis', address };
  const bounded = <T>(work: Promise<T>, operation: string): Promise<T> => withinServerTimeout(work, server, operation, SERVER_TIMEOUT_MS);
  // The scripts that grant refuse while the server has no life marker: one, unless a library wrote it.
  let marked: Promise<unknown> | undefined;

  return async (name, section) => {
    if (scope.holds(name)) return void (await section());
    await (marked ??= beginLifeScript.run(client, [LIFE_KEY], ['bench-lean-lock', String(ttlMs)]));
    const owner = ownerPrefix + (++ownerSeq).toString(36);
    const fence = await bounded(acquireShortScript.run(client, grantingKeys(name), [owner, ttlMs, `${waitMs} bench-lean`]), 'acquire');
    if (typeof fence !== 'number') throw new Error(`lean lock: "${name}" is held by someone else (it is for uncontended rounds only)`);
    const loss = new LazyAbort();
    held.set(owner, { key: name, fencingToken: fence, loss });
    const lease = deadlines.add(performance.now() + ttlMs, () => loss.abort(new Error(`lease of "${name}" ended`)));
    try {
      await scope.run(name, section);
    } finally {
      deadlines.cancel(lease);
      held.delete(owner);
      const keys = lockKeys(name);
      await bounded(releaseShortScript.run(client, [keys.owner, keys.queue], [ownerValue(fence, owner)]), 'release');
    }
  };
}
