import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { Redis } from 'ioredis';
import type { LockService } from '../../../lib';
import { createBackend } from '../../../lib/backends/registry';
import { lockServiceOver } from '../../support/lock-service-factory';
import { commandsExecuted, startRedisServer, type RedisServer } from '../../../servers/redis-server';
import { RECORD_DELAY_MS } from '../../../lib/backends/redis/redis-batch-leases';
import { lockKeys } from '../../../lib/backends/redis/redis-keys';
import { eventually, sleep } from '../../support/timing';

/**
 * Direct handoff means each release costs the same few commands however long the queue is:
 * no herd (every waiter retrying), no polling. Counted by the server itself (INFO commandstats,
 * which counts the commands run inside scripts too).
 */
describe('redis backend: commands per handoff', () => {
  let redis: RedisServer;
  let inspector: Redis;
  let services: LockService[];

  before(async () => {
    redis = await startRedisServer();
    inspector = new Redis(redis.url);
    services = await Promise.all(Array.from({ length: 5 }, async () => lockServiceOver(await createBackend({ type: 'redis', url: redis.url }))));
  });
  after(async () => {
    await Promise.all(services.map((service) => service.onApplicationShutdown()));
    inspector.disconnect();
    await redis.stop();
  });

  /**
   * Queues `waiters` behind a holder, each waiter from `waiterService(i)`, one at a time so the
   * queue order is known; then counts the commands of the `waiters` handoffs.
   */
  async function commandsPerHandoff(
    label: string,
    waiters: number,
    holderService: LockService,
    waiterService: (i: number) => LockService,
  ): Promise<{ perHandoff: number; byCommand: Record<string, number>; calls: Record<string, number> }> {
    const name = `handoff-${label}-${waiters}`;
    const queueKey = `{lock:${name}}:queue`;
    const holder = await holderService.acquire(name);
    let served = 0;
    const queued: Promise<void>[] = [];
    for (let i = 0; i < waiters; i++) {
      queued.push(waiterService(i).withLock(name, () => void served++, { waitTimeoutMs: 60_000 }));
      // Polled every 1 ms: a thousand waiters are queued one at a time.
      await eventually(async () => (await inspector.llen(queueKey)) >= i + 1, 5_000, `waiter ${i} to queue`, 1);
    }
    const before = await commandsExecuted((section) => inspector.info(section));
    await holder.release();
    await Promise.all(queued);
    const afterCount = await commandsExecuted((section) => inspector.info(section));
    assert.equal(served, waiters);
    const byCommand: Record<string, number> = {};
    const calls: Record<string, number> = {};
    for (const [command, total] of Object.entries(afterCount.byCommand)) {
      const delta = total - (before.byCommand[command] ?? 0);
      if (delta) {
        calls[command] = delta;
        byCommand[command] = Math.round((delta / waiters) * 100) / 100;
      }
    }
    // The LLEN polls above ran before the first count; none after it.
    return { perHandoff: (afterCount.total - before.total) / waiters, byCommand, calls };
  }

  it('stays constant from 100 to 1000 waiters on one key, with one grant message per handoff across processes', async (t) => {
    // Holder in a fifth process; consecutive waiters always in different processes.
    const across = (waiters: number) => commandsPerHandoff('across', waiters, services[4], (i) => services[i % 4]);
    const small = await across(100);
    const large = await across(1_000);
    t.diagnostic(`commands per handoff: ${small.perHandoff.toFixed(2)} with 100 waiters, ${large.perHandoff.toFixed(2)} with 1000`);
    t.diagnostic(`per handoff with 1000 waiters: ${JSON.stringify(large.byCommand)}`);
    assert.ok(large.perHandoff <= small.perHandoff * 1.05 + 0.5, `per handoff grew from ${small.perHandoff} to ${large.perHandoff}`);
    assert.ok(large.perHandoff <= 11, `a handoff costs ${large.perHandoff} commands`);
    assert.equal(large.byCommand.publish, 1, 'not exactly one grant message per handoff');
  });

  it('serves a burst of one process under one queue entry, in as many commands for 100 callers as for 1000', async (t) => {
    const burst = async (callers: number) => {
      const name = `handoff-burst-${callers}`;
      const keys = lockKeys(`lock:${name}`);
      const holder = await services[0].acquire(name);
      let served = 0;
      // One tick: one batch behind one entry.
      const queued = Array.from({ length: callers }, () => services[0].withLock(name, () => void served++, { waitTimeoutMs: 60_000 }));
      await eventually(async () => (await inspector.llen(keys.queue)) >= 1, 5_000, 'the burst to queue', 1);
      assert.equal(await inspector.llen(keys.queue), 1, 'the burst queued more than one entry');
      const before = await commandsExecuted((section) => inspector.info(section));
      await holder.release();
      await Promise.all(queued);
      // The last caller's release goes out as it returns: let it land before counting.
      await sleep(100);
      const afterCount = await commandsExecuted((section) => inspector.info(section));
      assert.equal(served, callers);
      assert.equal(await inspector.exists(keys.owner), 0, 'the lock was not freed after the burst');
      const calls: Record<string, number> = {};
      for (const [command, total] of Object.entries(afterCount.byCommand)) {
        const delta = total - (before.byCommand[command] ?? 0);
        if (delta) calls[command] = delta;
      }
      return { total: afterCount.total - before.total, calls };
    };
    const small = await burst(100);
    const large = await burst(1_000);
    t.diagnostic(`commands for the hand-overs of a burst: ${small.total} with 100 callers, ${large.total} with 1000: ${JSON.stringify(large.calls)}`);
    assert.ok(large.total <= small.total + 4, `the burst's cost grew from ${small.total} to ${large.total} commands`);
    assert.ok(large.total <= 25, `1000 hand-overs in one process cost ${large.total} commands`);
    // The one message gives the burst's entry the lock; the thousand turns under it need none.
    assert.equal(large.calls.publish, 1, 'not exactly one grant message for the burst');
  });

  it('tells Redis of the hand-overs of callers that each wait on Redis under the lock with one renewal per run, not one each', async (t) => {
    const name = 'handoff-sale';
    const keys = lockKeys(`lock:${name}`);
    const data = new Redis(redis.url);
    try {
      const callers = 200;
      const holder = await services[0].acquire(name);
      // A flash sale's critical section: a round trip to Redis on another connection.
      const queued = Array.from({ length: callers }, () => services[0].withLock(name, () => data.get('stock'), { waitTimeoutMs: 60_000 }));
      await eventually(async () => (await inspector.llen(keys.queue)) >= 1, 5_000, 'the callers to queue', 1);
      const before = await commandsExecuted((section) => inspector.info(section));
      const started = performance.now();
      await holder.release();
      await Promise.all(queued);
      const elapsedMs = performance.now() - started;
      await sleep(100);
      const afterCount = await commandsExecuted((section) => inspector.info(section));
      const scripts = (afterCount.byCommand.evalsha ?? 0) + (afterCount.byCommand.eval ?? 0) - (before.byCommand.evalsha ?? 0) - (before.byCommand.eval ?? 0);
      // The holder's release, the batch's final release, and the renewals that record the turns.
      const renewals = scripts - 2;
      const bound = Math.ceil(elapsedMs / RECORD_DELAY_MS) + 1;
      t.diagnostic(`${callers} hand-overs in ${elapsedMs.toFixed(1)} ms, each after a round trip: ${renewals} renewals (bound ${bound}; one per hand-over would be ${callers - 1})`);
      assert.ok(renewals <= bound, `${renewals} renewals for ${callers} hand-overs in ${elapsedMs.toFixed(1)} ms`);
    } finally {
      data.disconnect();
    }
  });
});
