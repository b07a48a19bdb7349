import 'reflect-metadata';
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { Pool } from 'pg';
import type { LockService } from '../../../lib';
import { createBackend } from '../../../lib/backends/registry';
import { runSql, startPostgresServer, type PostgresServer } from '../../../servers/postgres-server';
import { lockServiceOver } from '../../support/lock-service-factory';
import { sleep } from '../../support/timing';

/** How long a query of the application may wait for the pool's one connection while locks are taken back to back. */
const POOL_WAIT_BOUND_MS = 250;

/**
 * The backend keeps one pooled connection between back-to-back statements (a lock's take, its
 * release, the next take) and gives it back as the event loop turns: the application sharing
 * the pool is never kept waiting behind a loop of locks, and nothing stays checked out.
 */
describe('postgres backend: the connection kept between back-to-back statements', () => {
  let postgres: PostgresServer;
  const pools: Pool[] = [];
  const services: LockService[] = [];

  const serviceOn = async (pool: Pool) => {
    const service = lockServiceOver(await createBackend({ type: 'postgres', pool }, { ttlMs: 10_000, serverTimeoutMs: 5_000 }));
    services.push(service);
    return service;
  };
  const newPool = (max: number, applicationName: string) => {
    const pool = new Pool({ connectionString: postgres.url, max, application_name: applicationName });
    pool.on('error', () => undefined);
    pools.push(pool);
    return pool;
  };

  /** Runs `step` over and over in the background, until the returned stop is awaited. */
  const repeatInBackground = (step: () => Promise<unknown>) => {
    let repeating = true;
    const done = (async () => {
      while (repeating) await step();
    })();
    return async () => {
      repeating = false;
      await done;
    };
  };
  /** Once the event loop has turned, every connection of `pool` is back in it. */
  const assertAllBackInPool = async (pool: Pool) => {
    await new Promise((resolve) => setImmediate(resolve));
    assert.equal(pool.idleCount, pool.totalCount, 'a connection stayed checked out after the locks stopped');
  };

  before(async () => (postgres = await startPostgresServer()));
  after(async () => {
    for (const service of services) await service.onApplicationShutdown();
    await Promise.all(pools.map((pool) => pool.end()));
    await postgres.stop();
  });

  it("a loop of locks on a pool of one connection: the application's own queries on that pool still get it promptly, and it is back in the pool after", async (t) => {
    const pool = newPool(1, 'warm-shared');
    const locks = await serviceOn(pool);
    let cycles = 0;
    const stopLoop = repeatInBackground(async () => {
      await locks.withLock('warm-loop', () => undefined);
      cycles++;
    });
    const waits: number[] = [];
    for (let i = 0; i < 20; i++) {
      await sleep(20);
      const asked = performance.now();
      // Not awaited past the bound: a query starved behind the loop fails the test rather than hang it.
      await Promise.race([pool.query('SELECT 1'), sleep(POOL_WAIT_BOUND_MS * 8)]);
      waits.push(performance.now() - asked);
    }
    await stopLoop();
    const longest = Math.round(Math.max(...waits));
    t.diagnostic(`${cycles} lock cycles meanwhile; the application's queries waited at most ${longest} ms for the pool's connection (bound ${POOL_WAIT_BOUND_MS} ms)`);
    assert.ok(cycles >= 20, `only ${cycles} lock cycles ran: the loop was starved instead`);
    assert.ok(longest <= POOL_WAIT_BOUND_MS, `a query of the application waited ${longest} ms behind the loop of locks`);
    await assertAllBackInPool(pool);
  });

  it('the server terminates the pool\'s connections over and over under a loop of locks: every cycle completes, on new connections, tokens increasing', async (t) => {
    const pool = newPool(2, 'warm-terminated');
    const locks = await serviceOn(pool);
    let terminated = 0;
    const stopTerminating = repeatInBackground(async () => {
      await sleep(30);
      const [row] = await runSql<{ count: number }>(
        postgres.url,
        "SELECT count(pg_terminate_backend(pid))::int AS count FROM pg_stat_activity WHERE application_name = 'warm-terminated'",
      );
      terminated += row.count;
    });
    const tokens: bigint[] = [];
    const started = performance.now();
    try {
      while (performance.now() - started < 1_500) tokens.push(await locks.withLock('warm-terminated', (lock) => lock.fencingToken));
    } finally {
      await stopTerminating();
    }
    t.diagnostic(`${tokens.length} cycles completed while ${terminated} connections were terminated`);
    assert.ok(terminated >= 5, `only ${terminated} connections were terminated: the fault did not happen`);
    for (let i = 1; i < tokens.length; i++) assert.ok(tokens[i] > tokens[i - 1], `token ${tokens[i]} after ${tokens[i - 1]}`);
    await assertAllBackInPool(pool);
  });
});
