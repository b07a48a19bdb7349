import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { Redis, type RedisOptions } from 'ioredis';
import { LockServerUnreachableError, type LockBackend } from '../../../lib';
import { createBackend } from '../../../lib/backends/registry';
import { lockKeys } from '../../../lib/backends/redis/redis-keys';
import { startRedisServer, type RedisServer } from '../../../servers/redis-server';
import { TcpProxy } from '../../support/tcp-proxy';
import { eventually, sleep } from '../../support/timing';

const TTL_MS = 30_000;

/**
 * A lock asked for before the backend's grant channel is subscribed: the subscriber connection
 * (the backend's duplicate of a supplied client) goes through a proxy that black-holes it, while
 * the commands go straight to the server.
 */
describe('redis backend: locks asked for before the grant channel is subscribed', () => {
  let redis: RedisServer;
  let inspector: Redis;
  const cleanups: (() => Promise<unknown> | void)[] = [];
  let seq = 0;
  const newKey = () => `lock:subscription-${process.pid}-${++seq}`;
  const request = (key: string, owner: string) => ({ key, owner, ttlMs: TTL_MS, signal: new AbortController().signal });

  before(async () => {
    redis = await startRedisServer();
    inspector = new Redis(redis.url);
  });
  after(async () => {
    for (const cleanup of cleanups.reverse()) await cleanup();
    inspector.disconnect();
    await redis.stop();
  });

  /** A backend on a supplied client whose subscriber connects through a black-holed proxy. */
  async function unsubscribedBackend(serverTimeoutMs: number): Promise<{ backend: LockBackend; proxy: TcpProxy }> {
    const proxy = await TcpProxy.start(redis.port);
    proxy.blackHole();
    const client = new Redis(redis.url);
    client.duplicate = (override?: Partial<RedisOptions>) => new Redis({ ...client.options, ...override, host: '127.0.0.1', port: proxy.port });
    const backend = await createBackend({ type: 'redis', client }, { ttlMs: TTL_MS, serverTimeoutMs });
    cleanups.push(() => proxy.stop(), () => client.disconnect(), () => backend.close());
    await backend.ping!();
    return { backend, proxy };
  }

  async function subscribedBackend(): Promise<LockBackend> {
    const backend = await createBackend({ type: 'redis', url: redis.url });
    cleanups.push(() => backend.close());
    return backend;
  }

  it('grants a free name at once, without waiting for the subscription', async () => {
    const { backend } = await unsubscribedBackend(10_000);
    const startedAt = performance.now();
    const grant = await backend.acquire(request(newKey(), 'alone'));
    const tookMs = performance.now() - startedAt;
    console.log(`granted in ${tookMs.toFixed(1)} ms with the subscriber black-holed (bound 1000 ms; serverTimeoutMs 10000)`);
    assert.ok(tookMs < 1_000, `a free name took ${tookMs.toFixed(0)} ms`);
    await backend.release(grant);
  });

  it('queues, and once subscribed finds the grant published while it was not', async () => {
    const { backend, proxy } = await unsubscribedBackend(10_000);
    const holder = await subscribedBackend();
    const key = newKey();
    const held = await holder.acquire(request(key, 'holder'));
    const waiting = backend.acquire(request(key, 'waiter'));
    // It queued at the server while its subscriber could not subscribe.
    await eventually(async () => (await inspector.llen(lockKeys(key).queue)) === 1, 2_000, 'the waiter to queue');
    await holder.release(held);
    // The release handed the lock to the waiter, and its grant message went to nobody.
    await eventually(async () => (await inspector.llen(lockKeys(key).queue)) === 0, 2_000, 'the hand-off');
    await sleep(100);
    proxy.heal();
    const healedAt = performance.now();
    const grant = await waiting;
    const afterMs = performance.now() - healedAt;
    // Without the check once subscribed, the key's next safety check would come ttl / 3 = 10 s after it queued.
    console.log(`granted ${afterMs.toFixed(0)} ms after its subscriber could connect (bound 2000 ms; the periodic check is 10000 ms)`);
    assert.ok(afterMs < 2_000, `the grant took ${afterMs.toFixed(0)} ms`);
    assert.equal(grant.owner, 'waiter');
    assert.ok(grant.fencingToken > held.fencingToken, 'the hand-off gives a greater fencing token');
    assert.equal(await inspector.exists(lockKeys(key).owner), 1, 'the waiter holds the name at the server');
    await backend.release(grant);
  });

  it('fails a queued entry with LockServerUnreachableError once the channel is still not subscribed serverTimeoutMs later', async () => {
    const serverTimeoutMs = 1_500;
    const { backend } = await unsubscribedBackend(serverTimeoutMs);
    const holder = await subscribedBackend();
    const key = newKey();
    const held = await holder.acquire(request(key, 'holder'));
    const startedAt = performance.now();
    const error = await backend.acquire(request(key, 'waiter')).then(
      () => assert.fail('a waiter that cannot hear of its grant was not failed'),
      (failure: unknown) => failure,
    );
    const tookMs = performance.now() - startedAt;
    console.log(`failed after ${tookMs.toFixed(0)} ms (bound ${serverTimeoutMs + 500} ms: serverTimeoutMs ${serverTimeoutMs})`);
    assert.ok(error instanceof LockServerUnreachableError, `failed with ${String(error)}`);
    assert.ok(tookMs >= serverTimeoutMs - 50 && tookMs < serverTimeoutMs + 500, `failed after ${tookMs.toFixed(0)} ms`);
    // Its entry was cancelled (the queue skips an id without one): the holder's release frees the name.
    await eventually(async () => (await inspector.hlen(lockKeys(key).waiters)) === 0, 2_000, "the failed entry's cancel");
    await holder.release(held);
    assert.equal(await inspector.exists(lockKeys(key).owner), 0);
  });
});
