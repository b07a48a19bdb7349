import type { Redis } from 'ioredis';
import { ownerValue } from '../lib/backends/redis/redis-commands';
import { lockKeys } from '../lib/backends/redis/redis-keys';
import { acquireShortScript, releaseShortScript, type AcquireReply } from '../lib/backends/redis/redis-lock-scripts';
import { beginLifeScript, LIFE_KEY } from '../lib/backends/redis/server-life-scripts';
import { LeanLockCore } from './lean-lock-core';
import { grantingKeys } from './redis-command-floors';
import type { LockRunner } from './workloads';

/**
 * This library's uncontended Redis calls as the library sends them for a caller that may wait,
 * from a plain client: the life marker written once (the scripts that grant refuse while the
 * server has none, unless a library wrote it), the short acquire script, and the short release
 * of a lock granted at once. The scripts-alone floor and the lean lock both send exactly these.
 */
function libraryScripts(client: Redis, clientId: string, ttlMs: number, waitMs: number) {
  let marked: Promise<unknown> | undefined;
  return {
    async acquire(name: string, owner: string): Promise<AcquireReply | null> {
      await (marked ??= beginLifeScript.run(client, [LIFE_KEY], [clientId, String(ttlMs)]));
      return acquireShortScript.run(client, grantingKeys(name), [owner, ttlMs, `${waitMs} ${clientId}`]);
    },
    release(name: string, fence: number, owner: string): Promise<unknown> {
      const keys = lockKeys(name);
      return releaseShortScript.run(client, [keys.owner, keys.queue], [ownerValue(fence, owner)]);
    },
  };
}

/**
 * This library's acquire and release scripts sent by a plain ioredis client, one after the other,
 * with the keys the library sends (the life marker's too) and nothing around them (no in-process
 * queue, lease, renewal, re-entrancy or timeouts): the floor of this library's uncontended cycle
 * on Redis. Never waits: it fails if the name is held.
 */
export function scriptsAlone(client: Redis, ttlMs: number, waitMs: number): LockRunner {
  let seq = 0;
  const scripts = libraryScripts(client, 'bench-floor', ttlMs, waitMs);
  return async (name, section) => {
    const owner = `floor-${(++seq).toString(36)}`;
    const fence = await scripts.acquire(name, owner);
    if (typeof fence !== 'number') throw new Error(`the scripts-alone floor found "${name}" held`);
    await section();
    await scripts.release(name, fence, owner);
  };
}

/**
 * The least an uncontended cycle over this library's Redis scripts must do to keep the lock's
 * basic promises, written as lean as it goes on a plain ioredis client (LeanLockCore). No queue
 * of the process's own callers, no renewals, no waiting, no reconnection checks: a yardstick for
 * the library's own layer, not a lock to use (it refuses to wait).
 */
export function leanRedisLock(client: Redis, address: string, ttlMs: number, waitMs: number): LockRunner {
  const core = new LeanLockCore<number>({ name: 'redis', address }, ttlMs);
  const scripts = libraryScripts(client, 'bench-lean', ttlMs, waitMs);

  return async (name, section) => {
    if (core.holds(name)) return void (await section());
    const owner = core.newOwner();
    const fence = await core.bounded(scripts.acquire(name, owner), 'acquire');
    if (typeof fence !== 'number') throw new Error(`lean lock: "${name}" is held by someone else (it is for uncontended rounds only)`);
    await core.hold(name, owner, fence, section, () => core.bounded(scripts.release(name, fence, owner), 'release'));
  };
}
