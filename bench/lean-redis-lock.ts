import type { Redis } from 'ioredis';
import { ownerValue } from '../lib/backends/redis/redis-commands';
import { lockKeys } from '../lib/backends/redis/redis-keys';
import { acquireShortScript, releaseShortScript } from '../lib/backends/redis/redis-lock-scripts';
import { beginLifeScript, LIFE_KEY } from '../lib/backends/redis/server-life-scripts';
import { LeanLockCore } from './lean-lock-core';
import { grantingKeys } from './redis-command-floors';
import type { LockRunner } from './workloads';

/**
 * The least an uncontended cycle over this library's Redis scripts must do to keep the lock's
 * basic promises, written as lean as it goes on a plain ioredis client (LeanLockCore). No queue
 * of the process's own callers, no renewals, no waiting, no reconnection checks: a yardstick for
 * the library's own layer, not a lock to use (it refuses to wait).
 */
export function leanRedisLock(client: Redis, address: string, ttlMs: number, waitMs: number): LockRunner {
  const core = new LeanLockCore<number>({ name: 'redis', address }, ttlMs);
  // The scripts that grant refuse while the server has no life marker: one, unless a library wrote it.
  let marked: Promise<unknown> | undefined;

  return async (name, section) => {
    if (core.holds(name)) return void (await section());
    await (marked ??= beginLifeScript.run(client, [LIFE_KEY], ['bench-lean-lock', String(ttlMs)]));
    const owner = core.newOwner();
    const fence = await core.bounded(acquireShortScript.run(client, grantingKeys(name), [owner, ttlMs, `${waitMs} bench-lean`]), 'acquire');
    if (typeof fence !== 'number') throw new Error(`lean lock: "${name}" is held by someone else (it is for uncontended rounds only)`);
    const keys = lockKeys(name);
    await core.hold(name, owner, fence, section, () => core.bounded(releaseShortScript.run(client, [keys.owner, keys.queue], [ownerValue(fence, owner)]), 'release'));
  };
}
