import 'reflect-metadata';
import assert from 'node:assert/strict';
import { after, afterEach, before, describe, it } from 'node:test';
import { Redis } from 'ioredis';
import type { LockService } from '../../../lib';
import { createBackend } from '../../../lib/backends/registry';
import { lockKeys } from '../../../lib/backends/redis/redis-keys';
import { HolderProcess } from '../../support/holder-process';
import { lockServiceOver } from '../../support/lock-service-factory';
import { startRedisServer, type RedisServer } from '../../../servers/redis-server';
import { eventually, FAULT_SUITE_TIMEOUT_MS, sleep } from '../../support/timing';

/**
 * A grant pushed to a waiter whose process was paused (SIGSTOP) reaches it late: its lease began
 * at the server when the grant was made, not when the message is read. The waiter is a child
 * process (holder.worker.ts), paused while queued.
 */
describe('redis backend: a grant that reaches a paused waiter late', { timeout: FAULT_SUITE_TIMEOUT_MS }, () => {
  let redis: RedisServer;
  let inspector: Redis;
  const services: LockService[] = [];
  const holders: HolderProcess[] = [];
  let seq = 0;
  const newName = () => `late-${process.pid}-${++seq}`;

  before(async () => {
    redis = await startRedisServer();
    inspector = new Redis(redis.url);
  });
  after(async () => {
    inspector.disconnect();
    await redis.stop();
  });
  afterEach(async () => {
    await Promise.all(holders.splice(0).map((holder) => holder.stop()));
    await Promise.all(services.splice(0).map((service) => service.onApplicationShutdown()));
  });

  async function service(): Promise<LockService> {
    const created = lockServiceOver(await createBackend({ type: 'redis', url: redis.url }));
    services.push(created);
    return created;
  }

  /** A child process queued for `name` (its acquire pending), paused once Redis has it in the queue. */
  async function pausedWaiter(name: string, ttlMs: number): Promise<{ waiter: HolderProcess; acquired: Promise<bigint> }> {
    const waiter = await HolderProcess.start('redis', { url: redis.url }, ttlMs);
    holders.push(waiter);
    const acquired = waiter.acquire(name, { waitTimeoutMs: 30_000 });
    acquired.catch(() => undefined);
    await eventually(async () => (await inspector.llen(lockKeys(`lock:${name}`).queue)) === 1, 5_000, 'the child to queue');
    waiter.kill('SIGSTOP');
    return { waiter, acquired };
  }

  it('the lease handed to a paused waiter runs out and the next waiter is granted: after SIGCONT the paused one never holds the lock beside it', async (t) => {
    const ttlMs = 1_000;
    const name = newName();
    const holding = await (await service()).acquire(name, { ttlMs });
    const { waiter, acquired } = await pausedWaiter(name, ttlMs);
    await holding.release(); // Redis makes the paused waiter the owner and publishes its grant
    const releasedAt = performance.now();
    const next = await (await service()).acquire(name, { waitTimeoutMs: 10_000, ttlMs: 30_000 });
    t.diagnostic(`next waiter granted ${Math.round(performance.now() - releasedAt)} ms after the hand-off to the paused one (its ttl ${ttlMs} ms)`);
    waiter.kill('SIGCONT');
    // The resumed process reads its grant message and runs its overdue timers.
    await sleep(1_500);
    assert.deepEqual(
      waiter.events.filter((event) => event.type === 'acquired'),
      [],
      'the paused waiter took its stale grant for a fresh lease while the next waiter held the lock',
    );
    assert.equal(next.isHeld, true);
    await next.release();
    // It queued again (the lock is not lost to it for good): it is served after the next waiter.
    const token = await acquired;
    t.diagnostic(`paused waiter served after the next one, token ${token} > ${next.fencingToken}`);
    assert.ok(token > next.fencingToken, `token ${token} after ${next.fencingToken}`);
  });

  it('a grant read late with some of its lease left is confirmed with the server, then held: the next waiter waits for its release', async (t) => {
    const ttlMs = 2_000;
    const name = newName();
    const holding = await (await service()).acquire(name, { ttlMs });
    const { waiter, acquired } = await pausedWaiter(name, ttlMs);
    await holding.release();
    let nextGrantedAt = Infinity;
    const next = (await service()).acquire(name, { waitTimeoutMs: 15_000 }).then((lock) => {
      nextGrantedAt = performance.now();
      return lock;
    });
    // Three quarters of its lease gone: less than a third is left when it reads the grant.
    await sleep(ttlMs * 0.75);
    waiter.kill('SIGCONT');
    const token = await acquired;
    await sleep(ttlMs); // past the lease it was handed: it renewed, from the confirmation on
    assert.deepEqual(waiter.events.filter((event) => event.type === 'lost'), [], 'the confirmed grant was lost');
    assert.equal(nextGrantedAt, Infinity, 'the next waiter was granted while the late one held the lock');
    const releaseSentAt = performance.now();
    waiter.child.send({ type: 'release' });
    const lock = await next;
    t.diagnostic(`next waiter granted ${Math.round(nextGrantedAt - releaseSentAt)} ms after the late holder was told to release`);
    assert.ok(lock.fencingToken > token);
    await lock.release();
  });
});
