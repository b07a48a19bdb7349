import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { LockBackendError, type LockBackend } from '../../../lib';
import { Redis } from 'ioredis';
import { redisAddress } from '../../../lib/backends/redis/redis-address';
import { validateRedisOptions } from '../../../lib/backends/redis/redis-options';
import { createRedisBackend, type RedisLockBackend } from '../../../lib/backends/redis/redis.backend';
import { lockServiceOver, moduleLikeService } from '../../support/lock-service-factory';
import { startRedisServer, type RedisServer } from '../../../servers/redis-server';
import { startSentinel } from '../../../servers/redis-sentinel';
import type { ServerProcess } from '../../../servers/server-process';
import { eventually, sleep } from '../../support/timing';

const never = new AbortController().signal;
const request = (key: string, owner: string) => ({ key, owner, ttlMs: 10_000, signal: never });

/**
 * Two backends (two processes, as far as Redis can tell) take turns on one name: an uncontended
 * grant, then a queued waiter granted by the release script's hand-off and its PUBLISH. This
 * exercises every script and the subscriber connection, which is what a connection setup must carry.
 */
async function handOffBetween(first: LockBackend, second: LockBackend, key: string): Promise<void> {
  const held = await first.acquire(request(key, 'first'));
  const waiting = second.acquire(request(key, 'second'));
  await new Promise((resolve) => setTimeout(resolve, 50));
  await first.release(held);
  const handedOn = await waiting;
  assert.ok(handedOn.fencingToken > held.fencingToken);
  await second.release(handedOn);
}

describe('redis backend connection setups', () => {
  const backends: RedisLockBackend[] = [];
  const open = async (options: Parameters<typeof createRedisBackend>[0], serverTimeoutMs = 5_000) => {
    const backend = await createRedisBackend(options, { ttlMs: 30_000, serverTimeoutMs });
    backends.push(backend);
    return backend;
  };
  after(async () => {
    await Promise.all(backends.map((backend) => backend.close()));
  });

  describe('an ACL user with only the permissions docs/redis.md lists', () => {
    let redis: RedisServer;
    // The life marker's (docs/redis.md, "A restart without the data"): +hmget +hsetnx and its key.
    const commands = '+evalsha +eval +subscribe +get +set +del +exists +incr +pttl +pexpire +lpop +rpush +llen +hget +hset +hdel +hexists +time +publish +hmget +hsetnx';
    before(async () => {
      redis = await startRedisServer([
        '--user', 'default', 'off',
        // ioredis' ready check runs INFO; without +info it still connects, with a warning.
        // +ping for the health check (docs/redis.md lists it apart: the locks themselves do not need it).
        '--user', 'locks', 'on', '>s3cret', 'resetkeys', '~{lock:*', '~nest-distributed-lock:life', 'resetchannels', '&nest-distributed-lock:*', '-@all', ...commands.split(' '), '+info', '+ping',
        // The same, with +hgetall for inspect (docs/redis.md lists it apart).
        '--user', 'operator', 'on', '>s3cret', 'resetkeys', '~{lock:*', '~nest-distributed-lock:life', 'resetchannels', '&nest-distributed-lock:*', '-@all', ...commands.split(' '), '+info', '+hgetall',
      ]);
    });
    after(() => redis.stop());

    it('acquires, hands off through its grant channel and releases', async () => {
      const url = `redis://locks:s3cret@127.0.0.1:${redis.port}`;
      await handOffBetween(await open({ type: 'redis', url }), await open({ type: 'redis', url }), 'lock:acl');
    });

    it("answers the health check's PING", async () => {
      await (await open({ type: 'redis', url: `redis://locks:s3cret@127.0.0.1:${redis.port}` })).ping();
    });

    it('queues a burst as one entry and hands the lock over inside a process, with the same permissions', async () => {
      const service = lockServiceOver(await open({ type: 'redis', url: `redis://locks:s3cret@127.0.0.1:${redis.port}` }));
      const holder = await service.acquire('acl-burst');
      const served: number[] = [];
      // One tick: one batch, one queue entry.
      const burst = Array.from({ length: 5 }, (_, i) => service.withLock('acl-burst', () => void served.push(i), { waitTimeoutMs: 5_000 }));
      await sleep(100);
      await holder.release(); // the five follow in this process, under their entry
      await Promise.all(burst);
      assert.deepEqual(served, [0, 1, 2, 3, 4]);
    });

    it("keeps its holder description under the same key pattern, and inspect shows it to an operator with +hgetall", async () => {
      const { service: holder } = await moduleLikeService({ backend: { type: 'redis', url: `redis://locks:s3cret@127.0.0.1:${redis.port}` }, holderDescription: 'acl-pod' });
      const { service: operator } = await moduleLikeService({ backend: { type: 'redis', url: `redis://operator:s3cret@127.0.0.1:${redis.port}` } });
      try {
        const handle = await holder.acquire('acl-described');
        await eventually(async () => (await operator.inspect('acl-described')).holder?.description === 'acl-pod', 5_000, 'the description', 20);
        await handle.release();
      } finally {
        await Promise.all([holder.onApplicationShutdown(), operator.onApplicationShutdown()]);
      }
    });

    it('with a wrong password, starts, and its first call fails naming the server and the refusal, never the password', async () => {
      const backend = await open({ type: 'redis', url: `redis://locks:wrong@127.0.0.1:${redis.port}` }, 500);
      await assert.rejects(lockServiceOver(backend).acquire('wrong-password', { waitTimeoutMs: 5_000 }), (error: unknown) => {
        assert.ok(error instanceof LockBackendError, String(error));
        assert.equal(error.address, `127.0.0.1:${redis.port}`);
        assert.match(error.message, /WRONGPASS/);
        assert.doesNotMatch(error.message, /wrong@/);
        return true;
      });
    });
  });

  describe('Redis Sentinel (ioredis `sentinels` + `name`)', () => {
    let master: RedisServer;
    let sentinel: ServerProcess & { stop(): Promise<void> };
    before(async () => {
      master = await startRedisServer();
      sentinel = await startSentinel({ name: 'locks-master', port: master.port });
    });
    after(async () => {
      await sentinel?.stop();
      await master?.stop();
    });

    it('finds the master through the sentinel, and locks and hands off there', async () => {
      const options = { type: 'redis' as const, options: { sentinels: [{ host: '127.0.0.1', port: sentinel.port }], name: 'locks-master' } };
      await handOffBetween(await open(options), await open(options), 'lock:sentinel');
    });
  });

  describe("addresses in ioredis' own formats", () => {
    let redis: RedisServer;
    before(async () => (redis = await startRedisServer()));
    after(() => redis.stop());

    it('takes host:port with no scheme, redis:// URLs and options objects; address names host:port, never a password', async () => {
      const port = redis.port;
      const cases: [Parameters<typeof createRedisBackend>[0], string][] = [
        [{ type: 'redis', url: `127.0.0.1:${port}` }, `127.0.0.1:${port}`],
        [{ type: 'redis', url: `localhost:${port}` }, `localhost:${port}`],
        [{ type: 'redis', url: `redis://127.0.0.1:${port}/0` }, `127.0.0.1:${port}`],
        [{ type: 'redis', url: `redis://:nopass@127.0.0.1:${port}` }, `127.0.0.1:${port}`],
        [{ type: 'redis', options: { host: '127.0.0.1', port } }, `127.0.0.1:${port}`],
        // ioredis takes what the URL leaves out from options.
        [{ type: 'redis', url: `redis://127.0.0.1:${port}`, options: { port: 1, connectionName: 'locks' } }, `127.0.0.1:${port}`],
      ];
      for (const [options, address] of cases) {
        const [first, second] = [await open(options), await open(options)];
        assert.equal(first.address, address, JSON.stringify(options));
        await handOffBetween(first, second, `lock:address-${address}-${backends.length}`);
      }
    });

    it('names the address of a supplied client, and of TLS and socket addresses, as configured', async () => {
      const client = new Redis({ host: '127.0.0.1', port: redis.port, password: 'never-shown', lazyConnect: true });
      client.on('error', () => undefined);
      try {
        assert.equal(redisAddress({ type: 'redis', client }), `127.0.0.1:${redis.port}`);
      } finally {
        client.disconnect();
      }
      assert.equal(redisAddress({ type: 'redis', url: 'rediss://user:secret@cache.example:6380' }), 'cache.example:6380');
      assert.equal(redisAddress({ type: 'redis', url: 'cache.example' }), 'cache.example:6379');
      assert.equal(redisAddress({ type: 'redis', url: '/run/redis.sock' }), '/run/redis.sock');
      assert.equal(redisAddress({ type: 'redis', options: { sentinels: [{ host: 's1', port: 26379 }], name: 'locks' } }), 'master "locks" via sentinel s1:26379');
      for (const url of ['rediss://cache:6380', 'cache:6380', '[::1]:6379', '/run/redis.sock']) {
        assert.doesNotThrow(() => validateRedisOptions({ type: 'redis', url }), url);
      }
    });
  });
});
