import assert from 'node:assert/strict';
import { after, afterEach, before, describe, it } from 'node:test';
import { Redis } from 'ioredis';
import { LockBackendError, LockLostError, type LockHandle, type LockService } from '../../../lib';
import { TURN_BITS } from '../../../lib/queue/batch';
import { createBackend } from '../../../lib/backends/registry';
import { lockKeys } from '../../../lib/backends/redis/redis-keys';
import { lockServiceOver } from '../../support/lock-service-factory';
import { commandsExecuted, startRedisServer, type RedisServer } from '../../../servers/redis-server';
import { abortedWithin, assertExclusive, eventually, FAULT_SUITE_TIMEOUT_MS, sleep, type HoldInterval } from '../../support/timing';

/**
 * A process's callers of one name that arrive together queue behind one Redis entry (a batch,
 * see LocalQueues) and take turns while it holds: the lock goes from one to the next with no
 * round trip, and Redis renews the entry to the new holder's ttl afterwards, once per run of
 * hand-overs (docs/redis.md, "Local hand-over"). These tests check that it keeps the queue's
 * order and the tokens' order across processes, that a caller served this way never runs past
 * the lease Redis has, and that when Redis no longer agrees the new holder is told at once.
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
   * Starts the calls of `start()` in one tick (one batch) and waits until Redis has queued their
   * one entry and the process has read the reply. The calls come back wrapped, as awaiting a
   * promise of a promise would wait for it.
   */
  async function queue<T>(name: string, start: () => Promise<T>[]): Promise<{ done: Promise<T>[] }> {
    const queueKey = lockKeys(`lock:${name}`).queue;
    const length = await inspector.llen(queueKey);
    const started = start();
    for (const call of started) call.catch(() => undefined);
    await eventually(async () => (await inspector.llen(queueKey)) > length, 5_000, 'the entry to queue', 2);
    await sleep(20); // the acquire's reply has reached its process
    assert.equal(await inspector.llen(queueKey), length + 1, 'the callers of one tick did not share one entry');
    return { done: started };
  }

  it('keeps FIFO and increasing tokens across batches of one process and another, with one message per entry and none per caller', async () => {
    const name = `local-fifo-${process.pid}`;
    const [a, b] = [await service(), await service()];
    const holder = await a.acquire(name);
    const plan = [['a', 'a', 'a'], ['b', 'b'], ['a', 'a', 'a']];
    const granted: number[] = [];
    const intervals: HoldInterval[] = [];
    const waits: Promise<void>[] = [];
    let i = 0;
    for (const batch of plan) {
      const { done } = await queue(name, () =>
        batch.map((process_) => {
          const caller = i++;
          return (process_ === 'a' ? a : b).withLock(name, async (lock) => {
            granted.push(caller);
            const start = process.hrtime.bigint();
            // Held for a while: a hold of no length could not overlap another.
            await sleep(5);
            intervals.push({ start, end: process.hrtime.bigint(), fencingToken: lock.fencingToken, holder: `caller ${caller} (${process_})` });
          });
        }),
      );
      waits.push(...done);
    }
    const before = await commandsExecuted((section) => inspector.info(section));
    await holder.release();
    await Promise.all(waits);
    const afterCount = await commandsExecuted((section) => inspector.info(section));
    assert.deepEqual(granted, [0, 1, 2, 3, 4, 5, 6, 7], 'the grants did not follow the queue');
    assertExclusive(intervals);
    assert.ok(intervals[0].fencingToken > holder.fencingToken);
    // The callers of one batch share its entry's fence and take turns under it.
    const entries = intervals.map((interval) => interval.fencingToken >> TURN_BITS);
    assert.deepEqual(
      entries.map((entry) => entry - entries[0]),
      [0n, 0n, 0n, entries[3] - entries[0], entries[3] - entries[0], entries[5] - entries[0], entries[5] - entries[0], entries[5] - entries[0]],
    );
    assert.ok(entries[0] < entries[3] && entries[3] < entries[5], 'entries queued later got lower fences');
    const published = (afterCount.byCommand.publish ?? 0) - (before.byCommand.publish ?? 0);
    // The holder's entry to the first batch's, to b's, to a's again: 3 messages for 8 callers.
    assert.equal(published, 3, `${published} grant messages for 3 entries`);
  });

  it("a caller handed the lock runs under the old holder's lease until Redis renews it, and is told it lost the lock when that lease ran out first", async () => {
    const name = newName();
    const [a, b] = [await service(), await service()];
    // The old lease ends 600 ms after its grant; the new holder's own would run 2 s from the hand-over.
    const oldTtlMs = 600;
    const acquiredAt = Date.now();
    let inside: LockHandle | undefined;
    // One tick: one batch, one entry, put with the first caller's ttl.
    const holding = a.acquire(name, { ttlMs: oldTtlMs, renew: false });
    const local = a.withLock(
      name,
      async (lock) => {
        inside = lock;
        await abortedWithin(lock.signal, 5_000);
      },
      { ttlMs: 2_000 },
    );
    local.catch(() => undefined);
    const holder = await holding;
    const {
      done: [remote],
    } = await queue(name, () => [b.withLock(name, (lock) => lock.fencingToken, { waitTimeoutMs: 10_000 })]);
    await sleep(oldTtlMs / 2 - (Date.now() - acquiredAt));
    redis.server.pause(); // the renewal for the new holder cannot reach Redis; the old lease runs out meanwhile
    const released = holder.release();
    await sleep(50);
    assert.ok(inside, 'the caller of the same batch did not get the lock at once');
    assert.ok(inside.fencingToken > holder.fencingToken);
    await abortedWithin(inside.signal, 3_000);
    const lostAfterMs = Date.now() - acquiredAt;
    assert.ok(lostAfterMs >= oldTtlMs - 100, `told after ${lostAfterMs} ms, before the old lease ended (${oldTtlMs} ms)`);
    assert.ok(lostAfterMs <= oldTtlMs + 100, `told after ${lostAfterMs} ms: it ran past the old lease (${oldTtlMs} ms) unrenewed`);
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

  it('when Redis no longer has the entry as the batch\'s, the caller it was handed to is told at once and the lock goes on through Redis', async () => {
    const name = newName();
    const [a, b] = [await service(), await service()];
    let inside: LockHandle | undefined;
    let lostAt = 0;
    const holding = a.acquire(name);
    const local = a.withLock(name, async (lock) => {
      inside = lock;
      lock.signal.addEventListener('abort', () => (lostAt = Date.now()), { once: true });
      await abortedWithin(lock.signal, 5_000);
    });
    const third = a.withLock(name, () => undefined);
    local.catch(() => undefined);
    third.catch(() => undefined);
    const holder = await holding;
    let remoteGrantedAt = 0;
    // A short ttl: the remote process checks the queue every 200 ms, and so finds the key free.
    const {
      done: [remote],
    } = await queue(name, () => [b.withLock(name, (lock) => ((remoteGrantedAt = Date.now()), lock.fencingToken), { ttlMs: 600 })]);
    // As if the entry had lost the lock (a restart, an operator): another owner holds it for 300 ms.
    const keys = lockKeys(`lock:${name}`);
    await inspector.set(keys.owner, '1 intruder', 'PX', 300);
    const releasedAt = Date.now();
    await holder.release();
    await sleep(20); // the caller's handler starts a few promise turns after its grant
    assert.ok(inside, 'the caller of the same batch did not get the lock at once');
    await abortedWithin(inside.signal, 1_000);
    assert.equal((inside.signal.reason as LockLostError).reason, 'backend-reported');
    await assert.rejects(local, LockLostError);
    // The batch's entry is gone: its callers still waiting are told, naming the server.
    await assert.rejects(third, (error: unknown) => error instanceof LockBackendError && error.address === `127.0.0.1:${redis.port}`);
    const remoteToken = await remote;
    assert.ok(lostAt - releasedAt < 200, `told ${lostAt - releasedAt} ms after the release`);
    assert.ok(remoteGrantedAt >= lostAt, 'the next process got the lock before the refused holder was told');
    assert.ok(remoteToken > holder.fencingToken);
  });
});
