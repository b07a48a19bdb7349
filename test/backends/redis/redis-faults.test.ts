import 'reflect-metadata';
import assert from 'node:assert/strict';
import { after, afterEach, before, describe, it } from 'node:test';
import { Redis } from 'ioredis';
import { LockLostError } from '../../../lib';
import { createBackend, DEFAULT_BACKEND_SETTINGS } from '../../../lib/backends/registry';
import { RedisStockStore } from '../../../sample-app/inventory/redis-stock.store';
import { HolderFaults } from '../../support/holder-faults';
import { lockServiceOver } from '../../support/lock-service-factory';
import { startRedisServer, type RedisServer } from '../../../servers/redis-server';
import { abortedWithin, assertExclusive, FAULT_SUITE_TIMEOUT_MS, sleep, type HoldInterval } from '../../support/timing';

/** Lease of the fault tests: short, so each test takes about a second. */
const TTL_MS = 1_000;
/**
 * How long after the lease ends a waiter may take to get the lock: the 25 ms check margin, one
 * script round trip, and timer lateness on a loaded 2-core machine (measured: about 30-60 ms).
 */
const HANDOFF_BOUND_MS = 400;

describe('redis backend under faults', { timeout: FAULT_SUITE_TIMEOUT_MS }, () => {
  let redis: RedisServer;
  const faults = new HolderFaults('redis', () => ({ url: redis.url }), TTL_MS);
  const newName = () => faults.newName();
  const service = () => faults.service();
  const holder = () => faults.holder();

  before(async () => (redis = await startRedisServer()));
  after(() => redis.stop());
  afterEach(() => faults.stopAll());

  faults.holderCases(async () => new RedisStockStore(new Redis(redis.url)), HANDOFF_BOUND_MS);

  it('redis-server restarted while waiters are queued: no waiter is stranded, each gets the lock within its wait timeout', async (t) => {
    const name = newName();
    // A server of its own, whose every lease is 1.5 s: the restart loses its data, and the
    // quarantine that follows lasts the longest ttl of its life (docs/redis.md, "A restart without the data").
    const own = await startRedisServer();
    t.after(() => own.stop());
    const settings = { ...DEFAULT_BACKEND_SETTINGS, ttlMs: 1_500 };
    const clients = await Promise.all([0, 1, 2].map(async () => lockServiceOver(await createBackend({ type: 'redis', url: own.url }, settings), { ttlMs: 1_500 })));
    t.after(() => Promise.all(clients.map((client) => client.onApplicationShutdown())));
    const holding = await clients[0].acquire(name, { ttlMs: 1_500 });
    const intervals: HoldInterval[] = [];
    const waitTimeoutMs = 8_000;
    const started = Date.now();
    const waiters = Array.from({ length: 6 }, (_, i) =>
      clients[i % 3].withLock(
        name,
        async (lock) => {
          const start = process.hrtime.bigint();
          await sleep(20);
          intervals.push({ start, end: process.hrtime.bigint(), fencingToken: lock.fencingToken, holder: `waiter ${i}` });
        },
        { waitTimeoutMs, ttlMs: 1_500 },
      ),
    );
    await sleep(100);
    await own.server.restart();
    const outcomes = await Promise.allSettled(waiters);
    const elapsed = Date.now() - started;
    t.diagnostic(`all 6 waiters served ${elapsed} ms after they queued, across the restart`);
    const failures = outcomes.filter((outcome) => outcome.status === 'rejected').map((outcome) => String((outcome as PromiseRejectedResult).reason));
    assert.deepEqual(failures, [], 'a waiter did not get the lock after the restart');
    assert.ok(elapsed < waitTimeoutMs, `the waiters took ${elapsed} ms`);
    assertExclusive(intervals);
    // The old holder's key vanished with the restart: its renewal says so.
    await abortedWithin(holding.signal, 3_000);
    assert.ok(holding.signal.reason instanceof LockLostError);
    await holding.release();
  });

  it('a waiter whose process died is skipped once stale, and holds the lock at most its ttl before that', async (t) => {
    const name = newName();
    const [first, next] = [await service(), await service()];
    // Its process checks in every ttl/3 = 333 ms; silent for staleAfterMs (3 x 333 + 1000) it is dead.
    const staleAfterMs = 2_000;
    for (const releaseAfterKillMs of [staleAfterMs + 500, 0]) {
      const holding = await first.acquire(name);
      const dead = await holder();
      dead.acquire(name).catch(() => undefined); // queued first, then killed while waiting
      await sleep(200);
      // The same ttl as the dead waiter: its checks (every ttl/3) then see that lease's end in time.
      const waiting = next.acquire(name, { waitTimeoutMs: 10_000, ttlMs: TTL_MS });
      await sleep(100);
      dead.kill('SIGKILL');
      await sleep(releaseAfterKillMs);
      const releasedAt = Date.now();
      await holding.release();
      const lock = await waiting;
      const waitedMs = Date.now() - releasedAt;
      t.diagnostic(`release ${releaseAfterKillMs} ms after the queued process died: next live waiter served after ${waitedMs} ms`);
      const boundMs = releaseAfterKillMs > staleAfterMs ? HANDOFF_BOUND_MS : TTL_MS + HANDOFF_BOUND_MS;
      assert.ok(waitedMs <= boundMs, `the live waiter waited ${waitedMs} ms behind a dead one (bound ${boundMs} ms)`);
      await lock.release();
    }
  });

  it("a wrong owner's release or extend never affects the holder", async () => {
    const name = newName();
    const holderBackend = await createBackend({ type: 'redis', url: redis.url });
    const intruder = await createBackend({ type: 'redis', url: redis.url });
    const key = `lock:${name}`;
    const grant = await holderBackend.acquire({ key, owner: 'rightful', ttlMs: 30_000, signal: new AbortController().signal });
    const forged = [
      { ...grant, owner: 'intruder' },
      { ...grant, fencingToken: grant.fencingToken + 1n },
      { ...grant, fencingToken: grant.fencingToken - 1n },
    ];
    for (const fake of forged) {
      assert.equal(await intruder.renew(fake, 50), false, `a forged renew succeeded: ${fake.owner} ${fake.fencingToken}`);
      await intruder.release(fake);
    }
    await sleep(100);
    assert.equal(await intruder.tryAcquire({ key, owner: 'other', ttlMs: 1_000 }), null, 'a forged release freed the lock');
    const inspector = new Redis(redis.url);
    const pttl = await inspector.pttl(`{${key}}:owner`);
    inspector.disconnect();
    assert.ok(pttl > 29_000, `a forged extend changed the lease to ${pttl} ms`);
    assert.equal(await holderBackend.renew(grant, 30_000), true);
    await holderBackend.release(grant);
    assert.ok(await intruder.tryAcquire({ key, owner: 'next', ttlMs: 1_000 }), 'the rightful release did not free the lock');
    await holderBackend.close();
    await intruder.close();
  });
});
