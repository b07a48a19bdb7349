import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { Redis } from 'ioredis';
import { LockLostError, type LockBackend, type LockGrant } from '../../../lib';
import { createBackend } from '../../../lib/backends/registry';
import { batchToken, TURN_BITS } from '../../../lib/queue/batch';
import { lockKeys } from '../../../lib/backends/redis/redis-keys';
import { lockServiceOver } from '../../support/lock-service-factory';
import { startRedisServer, type RedisServer } from '../../../servers/redis-server';
import { abortedWithin, eventually, sleep } from '../../support/timing';

/** What only the Redis backend does: its grant messages, its give-up path and its lost signal. */
describe('redis backend: grants, give-ups and the lost signal', () => {
  let redis: RedisServer;
  let inspector: Redis;
  const backends: LockBackend[] = [];
  let seq = 0;
  const newKey = () => `lock:handoff-${process.pid}-${++seq}`;
  const request = (key: string, owner: string, signal = new AbortController().signal) => ({ key, owner, ttlMs: 30_000, signal });
  /** The fence of the queue entry a grant was served under (see Batch: token = fence << 16 + turn). */
  const entryFence = (grant: LockGrant) => grant.fencingToken >> TURN_BITS;
  /** The owner key's value: '<fence> <entry owner id>'. */
  const ownerOf = async (key: string) => {
    const [fence, owner] = (await inspector.get(lockKeys(key).owner))!.split(' ');
    return { fence: BigInt(fence), owner };
  };

  before(async () => {
    redis = await startRedisServer();
    inspector = new Redis(redis.url);
  });
  after(async () => {
    await Promise.all(backends.map((backend) => backend.close()));
    inspector.disconnect();
    await redis.stop();
  });

  async function backend(): Promise<LockBackend> {
    const created = await createBackend({ type: 'redis', url: redis.url });
    backends.push(created);
    return created;
  }

  it('fires the lost signal when renewal finds the key deleted or taken by another owner', async () => {
    const service = lockServiceOver(await backend());
    for (const tamper of [(key: string) => inspector.del(key), (key: string) => inspector.set(key, '999 intruder', 'PX', 30_000)]) {
      const name = `tampered-${++seq}`;
      const lock = await service.acquire(name, { ttlMs: 600 });
      await tamper(lockKeys(`lock:${name}`).owner);
      // Renewal runs every ttl / 3 = 200 ms; the lease itself would last until 600 ms.
      await abortedWithin(lock.signal, 450);
      const reason = lock.signal.reason as LockLostError;
      assert.ok(reason instanceof LockLostError);
      assert.equal(reason.reason, 'renewal-refused');
      await lock.release();
    }
    await service.onApplicationShutdown();
  });

  it('a waiter that gives up after its grant was sent hands the lock on at once', async () => {
    const key = newKey();
    const [holder, late, next] = [await backend(), await backend(), await backend()];
    const first = await holder.acquire(request(key, 'first'));
    const giveUp = new AbortController();
    const lateWait = late.acquire(request(key, 'late', giveUp.signal));
    await sleep(50);
    const nextWait = next.acquire(request(key, 'next'));
    await sleep(50);
    // The late waiter never hears of its grant (its subscriber is gone), then gives up.
    await (late as unknown as { connections: { subscriber: Redis } }).connections.subscriber.unsubscribe();
    const holderEntry = await ownerOf(key);
    await holder.release(first);
    // The late waiter's entry (the next fence) owns the lock now.
    const granted = await ownerOf(key);
    assert.equal(granted.fence, entryFence(first) + 1n);
    assert.notEqual(granted.owner, holderEntry.owner);
    const reason = new Error('gave up');
    const gaveUpAt = Date.now();
    giveUp.abort(reason);
    await assert.rejects(lateWait, (error) => error === reason);
    const handedOn: LockGrant = await nextWait;
    assert.ok(Date.now() - gaveUpAt < 500, `the next waiter waited ${Date.now() - gaveUpAt} ms (the late grant's lease is 30 s)`);
    assert.equal(handedOn.fencingToken, batchToken(entryFence(first) + 2n, 0n));
    await next.release(handedOn);
  });

  const listChannels = async () => new Set((await inspector.pubsub('CHANNELS', 'nest-distributed-lock:*')) as string[]);

  /** A new backend and its grant channel, once it has subscribed (in the background, at creation). */
  async function subscribedBackend(): Promise<{ receiver: LockBackend; channel: string }> {
    const existing = await listChannels();
    const receiver = await backend();
    const newChannels = async () => [...(await listChannels())].filter((channel) => !existing.has(channel));
    await eventually(async () => (await newChannels()).length > 0, 2_000, 'the new backend to subscribe');
    const channels = await newChannels();
    assert.equal(channels.length, 1, 'a backend subscribes to exactly one channel');
    return { receiver, channel: channels[0] };
  }

  it('a grant for an owner nobody waits for is released at once', async () => {
    const key = newKey();
    const receiverChannels = [(await subscribedBackend()).channel];
    const holder = await backend();
    await holder.acquire(request(key, 'ghost'));
    const ghost = await ownerOf(key);
    // Tell the receiver it was granted the ghost's lock, as a message that outlived its waiter would.
    await inspector.publish(receiverChannels[0], JSON.stringify([ghost.fence.toString(), key, ghost.owner]));
    const deadline = Date.now() + 1_000;
    while ((await inspector.exists(lockKeys(key).owner)) === 1) {
      assert.ok(Date.now() < deadline, 'the unwanted grant was not given back');
      await sleep(10);
    }
  });

  it('ignores what else is published on its channel (not JSON, other shapes) without throwing in ioredis, and goes on granting', async () => {
    const key = newKey();
    const { receiver, channel } = await subscribedBackend();
    const strays = ['not json', '{"fence":"1"}', 'null', '42', '[1, 2, 3]', '["x", "k", "o"]', '["1", "k"]', '["1", "k", "o", "soon"]', '["1", "k", "o", "1", "extra"]'];
    for (const stray of strays) await inspector.publish(channel, stray);
    const holder = await backend();
    const first = await holder.acquire(request(key, 'first'));
    const waiting = receiver.acquire(request(key, 'second'));
    await sleep(50);
    await holder.release(first);
    const handedOn = await waiting;
    assert.equal(handedOn.fencingToken, batchToken(entryFence(first) + 1n, 0n));
    await receiver.release(handedOn);
  });
});
