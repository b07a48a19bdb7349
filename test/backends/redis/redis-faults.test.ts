import 'reflect-metadata';
import assert from 'node:assert/strict';
import { after, afterEach, before, describe, it } from 'node:test';
import { Redis } from 'ioredis';
import { LockLostError, type LockService } from '../../../lib';
import { createBackend } from '../../../lib/backends/registry';
import { RedisStockStore } from '../../../sample-app/inventory/redis-stock.store';
import { HolderProcess } from '../../support/holder-process';
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
  const services: LockService[] = [];
  const holders: HolderProcess[] = [];
  let seq = 0;
  const newName = () => `fault-${process.pid}-${++seq}`;

  before(async () => (redis = await startRedisServer()));
  after(() => redis.stop());
  afterEach(async () => {
    await Promise.all(holders.splice(0).map((holder) => holder.stop()));
    await Promise.all(services.splice(0).map((service) => service.onApplicationShutdown()));
  });

  async function service(): Promise<LockService> {
    const created = lockServiceOver(await createBackend({ type: 'redis', url: redis.url }));
    services.push(created);
    return created;
  }

  async function holder(): Promise<HolderProcess> {
    const started = await HolderProcess.start('redis', { url: redis.url }, TTL_MS);
    holders.push(started);
    return started;
  }

  it('a holder killed with SIGKILL: a waiter in another process gets the lock within the ttl plus a small bound', async (t) => {
    const name = newName();
    const killed = await holder();
    const killedToken = await killed.acquire(name);
    const waiter = (await service()).acquire(name, { waitTimeoutMs: 10_000 });
    await sleep(TTL_MS / 2); // the holder renews meanwhile: the lease left at the kill is the whole ttl
    const killedAt = Date.now();
    killed.kill('SIGKILL');
    const lock = await waiter;
    const waitedMs = Date.now() - killedAt;
    t.diagnostic(`lock handed on ${waitedMs} ms after SIGKILL (ttl ${TTL_MS} ms)`);
    assert.ok(waitedMs <= TTL_MS + HANDOFF_BOUND_MS, `the waiter got the lock ${waitedMs} ms after the kill (ttl ${TTL_MS} ms)`);
    assert.ok(lock.fencingToken > killedToken);
    await lock.release();
  });

  it('a holder paused past its ttl: another process gets the lock; after SIGCONT its signal has fired and its fenced write is refused', async (t) => {
    const name = newName();
    const sku = `sku-${name}`;
    const store = new RedisStockStore(new Redis(redis.url));
    await store.seed(sku, 10);
    const paused = await holder();
    const staleToken = await paused.acquire(name);
    paused.kill('SIGSTOP');
    const started = Date.now();
    const lock = await (await service()).acquire(name, { waitTimeoutMs: 10_000 });
    t.diagnostic(`lock taken ${Date.now() - started} ms after SIGSTOP (ttl ${TTL_MS} ms)`);
    assert.ok(Date.now() - started <= TTL_MS + HANDOFF_BOUND_MS, `took ${Date.now() - started} ms`);
    assert.ok(lock.fencingToken > staleToken);
    await store.write(sku, { stock: 9, lucky: 1 }, lock.fencingToken);
    paused.kill('SIGCONT');
    const lost = await paused.lost(5_000);
    assert.match(lost.message, /lost/);
    assert.equal(await paused.write(sku, { stock: 5, lucky: 5 }), 'StaleFencingTokenError');
    assert.deepEqual(await store.read(sku), { stock: 9, lucky: 1 }, 'the stale write changed the stock');
    assert.equal(lock.isHeld, true, "the paused holder's wake-up disturbed the new holder");
    await lock.release();
    await store.close();
  });

  it('redis-server restarted while waiters are queued: no waiter is stranded, each gets the lock within its wait timeout', async (t) => {
    const name = newName();
    const clients = [await service(), await service(), await service()];
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
    await redis.server.restart();
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
