import assert from 'node:assert/strict';
import { Redis } from 'ioredis';
import { after, before, describe, it } from 'node:test';
import type { LockHandle, LockService } from '../../../lib';
import { lockKeys } from '../../../lib/backends/redis/redis-keys';
import { createRedisBackend } from '../../../lib/backends/redis/redis.backend';
import { nextRenewal } from '../../../lib/lock-lease';
import { commandsExecuted, startRedisServer, type RedisServer } from '../../../servers/redis-server';
import { lockServiceOver } from '../../support/lock-service-factory';
import { sleep } from '../../support/timing';

const HELD = 1_000;
const TTL_MS = 3_000;
/** LockLease renews at a third of the ttl. */
const INTERVAL_MS = TTL_MS / 3;

describe('lease renewals on Redis are batched', () => {
  let redis: RedisServer;
  let admin: Redis;
  let service: LockService;
  const held: LockHandle[] = [];

  before(async () => {
    redis = await startRedisServer();
    admin = new Redis(redis.url);
    service = lockServiceOver(await createRedisBackend({ type: 'redis', url: redis.url }));
  });
  after(async () => {
    await Promise.all(held.map((handle) => handle.release()));
    await service?.onApplicationShutdown();
    admin?.disconnect();
    await redis?.stop();
  });

  it('the renewal grid: one interval ahead at most, an eighth early at most, shared by leases due close together', () => {
    for (const now of [0, 1.5, 999.9, 123_456.7]) {
      const at = nextRenewal(1_000, now);
      assert.ok(at <= now + 1_000 && at > now + 1_000 - 125, `${at} for now ${now}`);
    }
    assert.equal(nextRenewal(1_000, 2_000.1), nextRenewal(1_000, 2_124.9));
  });

  it(`${HELD} held locks renew with at most one command per 100 locks per interval, and stay held`, async (t) => {
    for (let from = 0; from < HELD; from += 250) {
      held.push(...(await Promise.all(Array.from({ length: 250 }, (_, i) => service.acquire(`renew-${from + i}`, { ttlMs: TTL_MS })))));
    }
    const evalshas = async () => (await commandsExecuted((section) => admin.info(section))).byCommand.evalsha ?? 0;
    const before = await evalshas();
    const started = performance.now();
    await sleep(3 * INTERVAL_MS);
    const intervals = (performance.now() - started) / INTERVAL_MS;
    const commands = (await evalshas()) - before; // nothing else runs a script meanwhile
    const perHundredPerInterval = commands / intervals / (HELD / 100);
    t.diagnostic(`${commands} script calls in ${intervals.toFixed(2)} renewal intervals for ${HELD} locks: ${perHundredPerInterval.toFixed(2)} per 100 locks per interval (bound 1; unbatched: 100)`);
    assert.ok(commands > 0, 'no renewal at all');
    assert.ok(perHundredPerInterval <= 1, `${perHundredPerInterval.toFixed(2)} commands per 100 locks per interval`);
    assert.deepEqual(held.filter((handle) => !handle.isHeld).map((handle) => handle.key), []);
  });

  it('a lock taken away inside a batch loses its lease alone: the others of its batch stay held', async (t) => {
    const victim = held[HELD / 2];
    // An operator's DEL of the owner key: the next batched renewal finds it gone.
    await admin.del(lockKeys(`lock:${victim.key}`).owner);
    const deletedAt = performance.now();
    await new Promise<void>((resolve) => victim.signal.addEventListener('abort', () => resolve(), { once: true }));
    const lostAfterMs = performance.now() - deletedAt;
    t.diagnostic(`the victim's lost signal fired ${lostAfterMs.toFixed(0)} ms after its key was deleted (bound: one interval, ${INTERVAL_MS} ms, + 500)`);
    assert.ok(lostAfterMs <= INTERVAL_MS + 500, `${lostAfterMs} ms`);
    await sleep(INTERVAL_MS);
    assert.deepEqual(held.filter((handle) => handle !== victim && !handle.isHeld).map((handle) => handle.key), []);
  });
});
