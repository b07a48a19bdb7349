import 'reflect-metadata';
import assert from 'node:assert/strict';
import { after, afterEach, before, describe, it } from 'node:test';
import type { LockService } from '../../../lib';
import { createBackend } from '../../../lib/backends/registry';
import { PostgresStockStore } from '../../../sample-app/inventory/postgres-stock.store';
import { runSql, startPostgresServer, type PostgresServer } from '../../../servers/postgres-server';
import { HolderProcess } from '../../support/holder-process';
import { lockServiceOver } from '../../support/lock-service-factory';
import { assertExclusive, FAULT_SUITE_TIMEOUT_MS, sleep, type HoldInterval } from '../../support/timing';

/** Lease of the fault tests: short, so each test takes about a second. */
const TTL_MS = 1_000;
/**
 * How long after the lease ends a waiter may take to get the lock: the safety net's 25 ms
 * margin after the holder's lease, one statement, and timer lateness on a loaded 2-core machine.
 */
const HANDOFF_BOUND_MS = 400;

describe('postgres backend under faults', { timeout: FAULT_SUITE_TIMEOUT_MS }, () => {
  let postgres: PostgresServer;
  const services: LockService[] = [];
  const holders: HolderProcess[] = [];
  let seq = 0;
  const newName = () => `fault-${process.pid}-${++seq}`;

  before(async () => (postgres = await startPostgresServer()));
  after(() => postgres.stop());
  afterEach(async () => {
    await Promise.all(holders.splice(0).map((holder) => holder.stop()));
    await Promise.all(services.splice(0).map((service) => service.onApplicationShutdown()));
  });

  async function service(): Promise<LockService> {
    const created = lockServiceOver(await createBackend({ type: 'postgres', url: postgres.url }));
    services.push(created);
    return created;
  }

  async function holder(): Promise<HolderProcess> {
    const started = await HolderProcess.start('postgres', { url: postgres.url }, TTL_MS);
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
    t.diagnostic(`lock handed on ${waitedMs} ms after SIGKILL (ttl ${TTL_MS} ms, bound ${TTL_MS + HANDOFF_BOUND_MS} ms)`);
    assert.ok(waitedMs <= TTL_MS + HANDOFF_BOUND_MS, `the waiter got the lock ${waitedMs} ms after the kill (ttl ${TTL_MS} ms)`);
    assert.ok(lock.fencingToken > killedToken);
    await lock.release();
  });

  it('a holder paused past its ttl: another process gets the lock; after SIGCONT its signal has fired and its fenced write is refused', async (t) => {
    const name = newName();
    const sku = `sku-${name}`;
    const store = await PostgresStockStore.connect(postgres.url);
    await store.seed(sku, 10);
    const paused = await holder();
    const staleToken = await paused.acquire(name);
    paused.kill('SIGSTOP');
    const started = Date.now();
    const lock = await (await service()).acquire(name, { waitTimeoutMs: 10_000 });
    t.diagnostic(`lock taken ${Date.now() - started} ms after SIGSTOP (ttl ${TTL_MS} ms, bound ${TTL_MS + HANDOFF_BOUND_MS} ms)`);
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

  it("pg_terminate_backend of every connection of the holder's process: the lock stays held (no connection is pinned), a waiter is still woken", async (t) => {
    const name = newName();
    const [first, next] = [await service(), await service()];
    const holding = await first.acquire(name, { ttlMs: TTL_MS });
    const waiting = next.acquire(name, { waitTimeoutMs: 10_000, ttlMs: TTL_MS });
    await sleep(200);
    // Every connection of ours: the pools' and both LISTEN connections (an advisory lock would be gone now).
    const [{ terminated }] = await runSql<{ terminated: number }>(
      postgres.url,
      `SELECT count(pg_terminate_backend(pid))::int AS terminated FROM pg_stat_activity WHERE application_name LIKE 'nest-distributed-lock%'`,
    );
    t.diagnostic(`terminated ${terminated} connections`);
    assert.ok(terminated >= 2, `only ${terminated} connections were terminated`);
    // Renewals go on over new connections: the holder outlives several ttls.
    await sleep(TTL_MS * 2.5);
    assert.equal(holding.isHeld, true, 'the holder lost its lock with its connections');
    assert.equal(holding.signal.aborted, false);
    const releasedAt = Date.now();
    await holding.release();
    const lock = await waiting;
    const waitedMs = Date.now() - releasedAt;
    t.diagnostic(`the waiter, whose LISTEN connection was terminated, was granted ${waitedMs} ms after the release (bound ${HANDOFF_BOUND_MS} ms)`);
    assert.ok(waitedMs <= HANDOFF_BOUND_MS, `the waiter waited ${waitedMs} ms`);
    assert.ok(lock.fencingToken > holding.fencingToken);
    await lock.release();
  });

  it('postgres restarted while waiters are queued: the queue survives, no waiter is stranded, tokens keep increasing', async (t) => {
    const name = newName();
    const clients = [await service(), await service(), await service()];
    const holding = await clients[0].acquire(name, { ttlMs: 1_500 });
    const holdStart = process.hrtime.bigint();
    const intervals: HoldInterval[] = [];
    const waitTimeoutMs = 10_000;
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
    await postgres.server.restart();
    // The lease row and the queue are tables: they outlive the restart, so the waiters wait for this release.
    intervals.push({ start: holdStart, end: process.hrtime.bigint(), fencingToken: holding.fencingToken, holder: 'first' });
    await holding.release();
    const outcomes = await Promise.allSettled(waiters);
    const elapsed = Date.now() - started;
    t.diagnostic(`all 6 waiters served ${elapsed} ms after they queued, across the restart (bound ${waitTimeoutMs} ms)`);
    const failures = outcomes.filter((outcome) => outcome.status === 'rejected').map((outcome) => String((outcome as PromiseRejectedResult).reason));
    assert.deepEqual(failures, [], 'a waiter did not get the lock after the restart');
    assert.ok(elapsed < waitTimeoutMs, `the waiters took ${elapsed} ms`);
    assertExclusive(intervals);
  });

  it('a waiter whose process died is skipped once its liveness runs out, and holds the lock at most its ttl before that', async (t) => {
    const name = newName();
    const [first, next] = [await service(), await service()];
    // The dead waiter's entry stays live for its ttl (its process refreshed it every third of that).
    const staleAfterMs = TTL_MS;
    for (const releaseAfterKillMs of [staleAfterMs + 300, 0]) {
      const holding = await first.acquire(name);
      const dead = await holder();
      dead.acquire(name).catch(() => undefined); // queued first, then killed while waiting
      await sleep(200);
      const waiting = next.acquire(name, { waitTimeoutMs: 10_000, ttlMs: TTL_MS });
      await sleep(100);
      dead.kill('SIGKILL');
      await sleep(releaseAfterKillMs);
      const releasedAt = Date.now();
      await holding.release();
      const lock = await waiting;
      const waitedMs = Date.now() - releasedAt;
      const boundMs = releaseAfterKillMs > staleAfterMs ? HANDOFF_BOUND_MS : TTL_MS + HANDOFF_BOUND_MS;
      t.diagnostic(`release ${releaseAfterKillMs} ms after the queued process died: next live waiter served after ${waitedMs} ms (bound ${boundMs} ms)`);
      assert.ok(waitedMs <= boundMs, `the live waiter waited ${waitedMs} ms behind a dead one (bound ${boundMs} ms)`);
      await lock.release();
    }
  });
});
