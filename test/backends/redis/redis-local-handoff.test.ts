import assert from 'node:assert/strict';
import { after, afterEach, before, describe, it } from 'node:test';
import { Redis } from 'ioredis';
import { LockLostError, type LockHandle, type LockService } from '../../../lib';
import { createBackend } from '../../../lib/backends/registry';
import { lockKeys } from '../../../lib/backends/redis/redis-keys';
import { lockServiceOver } from '../../support/lock-service-factory';
import { commandsExecuted, startRedisServer, type RedisServer } from '../../../servers/redis-server';
import { abortedWithin, assertExclusive, eventually, FAULT_SUITE_TIMEOUT_MS, sleep, type HoldInterval } from '../../support/timing';

/**
 * When the waiter right behind a holder in the Redis queue belongs to the same process, the
 * holder hands the lock over in the process and tells Redis afterwards (docs/redis.md, "Local
 * hand-over"). These tests check that it keeps the queue's order and the tokens' order, and
 * that when Redis no longer agrees, the new holder is told at once that its lock is lost.
 */
describe('redis backend: hand-over inside a process', { timeout: FAULT_SUITE_TIMEOUT_MS }, () => {
  let redis: RedisServer;
  let inspector: Redis;
  const services: LockService[] = [];
  let seq = 0;
  const newName = () => `local-${process.pid}-${++seq}`;

  before(async () => {
    redis = await startRedisServer();
    inspector = new Redis(redis.url);
  });
  afterEach(async () => {
    redis.server.resume();
    await Promise.all(services.splice(0).map((service) => service.onApplicationShutdown()));
  });
  after(async () => {
    inspector.disconnect();
    await redis.stop();
  });

  async function service(): Promise<LockService> {
    const created = lockServiceOver(await createBackend({ type: 'redis', url: redis.url }));
    services.push(created);
    return created;
  }

  /**
   * Starts `start()` and waits until Redis has queued it and the process has read the reply.
   * The call's own promise comes back wrapped, as awaiting a promise of a promise would wait for both.
   */
  async function queue<T>(name: string, start: () => Promise<T>): Promise<{ done: Promise<T> }> {
    const queueKey = lockKeys(`lock:${name}`).queue;
    const length = await inspector.llen(queueKey);
    const started = start();
    started.catch(() => undefined);
    await eventually(async () => (await inspector.llen(queueKey)) > length, 5_000, 'the waiter to queue', 2);
    await sleep(20); // the acquire's reply has reached its process
    return { done: started };
  }

  it('keeps FIFO and increasing tokens across runs of one process and another, with one message per change of process', async () => {
    const name = `local-fifo-${process.pid}`;
    const [a, b] = [await service(), await service()];
    const holder = await a.acquire(name);
    const plan = ['a', 'a', 'a', 'b', 'b', 'a', 'a', 'a'];
    const granted: number[] = [];
    const intervals: HoldInterval[] = [];
    const waits: Promise<void>[] = [];
    for (const [i, process_] of plan.entries()) {
      const client = process_ === 'a' ? a : b;
      const { done } = await queue(name, () =>
        client.withLock(name, async (lock) => {
          granted.push(i);
          const start = process.hrtime.bigint();
          // Held for a while: a hold of no length could not overlap another.
          await sleep(5);
          intervals.push({ start, end: process.hrtime.bigint(), fencingToken: lock.fencingToken, holder: `waiter ${i} (${process_})` });
        }),
      );
      waits.push(done);
    }
    const before = await commandsExecuted((section) => inspector.info(section));
    await holder.release();
    await Promise.all(waits);
    const afterCount = await commandsExecuted((section) => inspector.info(section));
    assert.deepEqual(granted, plan.map((_, i) => i), 'the grants did not follow the queue');
    assertExclusive(intervals);
    assert.ok(intervals[0].fencingToken > holder.fencingToken);
    const published = (afterCount.byCommand.publish ?? 0) - (before.byCommand.publish ?? 0);
    // a -> b and b -> a go through Redis; every other hand-over stays in its process.
    assert.equal(published, 2, `${published} grant messages for 2 changes of process`);
  });

  it("the new holder runs under the old holder's lease until Redis records it, and is told it lost the lock when that lease ran out first", async () => {
    const name = newName();
    const [a, b] = [await service(), await service()];
    // The old lease ends 600 ms after its grant; the new holder's own would run 2 s from the hand-over.
    const oldTtlMs = 600;
    const acquiredAt = Date.now();
    const holder = await a.acquire(name, { ttlMs: oldTtlMs, renew: false });
    let inside: LockHandle | undefined;
    const { done: local } = await queue(name, () =>
      a.withLock(
        name,
        async (lock) => {
          inside = lock;
          await abortedWithin(lock.signal, 5_000);
        },
        { ttlMs: 2_000 },
      ),
    );
    const { done: remote } = await queue(name, () => b.withLock(name, (lock) => lock.fencingToken, { waitTimeoutMs: 10_000 }));
    await sleep(oldTtlMs / 2 - (Date.now() - acquiredAt));
    redis.server.pause(); // the transfer cannot reach Redis; the old lease runs out meanwhile
    // Its release ends when Redis answers the transfer; the waiter does not wait for that.
    const released = holder.release();
    await sleep(50);
    assert.ok(inside, 'the waiter of the same process did not get the lock at once');
    assert.ok(inside.fencingToken > holder.fencingToken);
    await abortedWithin(inside.signal, 3_000);
    const lostAfterMs = Date.now() - acquiredAt;
    assert.ok(lostAfterMs >= oldTtlMs - 100, `told after ${lostAfterMs} ms, before the old lease ended (${oldTtlMs} ms)`);
    assert.ok(lostAfterMs <= oldTtlMs + 100, `told after ${lostAfterMs} ms: it ran past the old lease (${oldTtlMs} ms) unrecorded`);
    const reason = inside.signal.reason as LockLostError;
    assert.ok(reason instanceof LockLostError);
    assert.equal(reason.reason, 'lease-expired');
    await sleep(200); // the old lease is gone at the server too
    redis.server.resume();
    await released;
    await assert.rejects(local, LockLostError);
    const remoteToken = await remote;
    assert.ok(remoteToken > inside.fencingToken, 'the next holder got a lower token than the lost one');
  });

  it('when Redis no longer has the next waiter as the process believes, that waiter is told at once and the lock goes on through Redis', async () => {
    const name = newName();
    const [a, b] = [await service(), await service()];
    const holder = await a.acquire(name);
    let inside: LockHandle | undefined;
    let lostAt = 0;
    const { done: local } = await queue(name, () =>
      a.withLock(name, async (lock) => {
        inside = lock;
        lock.signal.addEventListener('abort', () => (lostAt = Date.now()), { once: true });
        await abortedWithin(lock.signal, 5_000);
      }),
    );
    let remoteGrantedAt = 0;
    const { done: remote } = await queue(name, () => b.withLock(name, (lock) => ((remoteGrantedAt = Date.now()), lock.fencingToken)));
    // As if the waiter had been re-queued: its entry now carries another fence.
    const keys = lockKeys(`lock:${name}`);
    const [localOwner] = await inspector.lrange(keys.queue, 0, 0);
    const entry = (await inspector.hget(keys.waiters, localOwner))!;
    await inspector.hset(keys.waiters, localOwner, entry.replace(/ \d+$/, ' 999999999'));
    const releasedAt = Date.now();
    await holder.release();
    assert.ok(inside, 'the waiter of the same process did not get the lock at once');
    await abortedWithin(inside.signal, 1_000);
    assert.equal((inside.signal.reason as LockLostError).reason, 'backend-reported');
    await assert.rejects(local, LockLostError);
    const remoteToken = await remote;
    assert.ok(lostAt - releasedAt < 500, `told ${lostAt - releasedAt} ms after the release`);
    assert.ok(remoteGrantedAt >= lostAt, 'the next process got the lock before the refused holder was told');
    assert.ok(remoteToken > holder.fencingToken);
    assert.equal(await inspector.hexists(keys.waiters, localOwner), 0, 'the refused waiter was left in the queue');
  });
});
