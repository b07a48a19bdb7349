import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { after, before, describe, it } from 'node:test';
import { Cluster, Redis } from 'ioredis';
import type { LockService } from '../../../lib';
import { createBackend } from '../../../lib/backends/registry';
import { keySlot, plainLockKeys } from '../../../lib/backends/redis/plain/redis-plain-keys';
import { RETRY_CAP_MS } from '../../../lib/backends/redis/plain/redis-plain-waits';
import { startRedisServer, type RedisServer } from '../../../servers/redis-server';
import { lockServiceOver } from '../../support/lock-service-factory';
import { assertExclusive, sleep, type HoldInterval } from '../../support/timing';

/**
 * The plain Redis lock exactly as the seed's RedisLock took it (and redis-py's Lock, redsync):
 * `SET key value NX PX ttl`, released by a Lua compare-and-delete. A real ioredis client, no
 * code of this library.
 */
class SeedRedisLock {
  private readonly value = randomBytes(16).toString('hex');
  constructor(
    private readonly redis: Redis,
    readonly key: string,
  ) {}

  async tryLock(ttlMs: number): Promise<boolean> {
    return (await this.redis.set(this.key, this.value, 'PX', ttlMs, 'NX')) === 'OK';
  }

  async unlock(): Promise<boolean> {
    const script = "if redis.call('get', KEYS[1]) == ARGV[1] then return redis.call('del', KEYS[1]) else return 0 end";
    return (await this.redis.eval(script, 1, this.key, this.value)) === 1;
  }
}

/** The slack above a bound for the event loop and the server on a shared two-core machine. */
const MARGIN_MS = 150;

describe("redis protocol 'plain' against a plain client", () => {
  let redis: RedisServer;
  let notifying: RedisServer;
  let raw: Redis;
  const services: LockService[] = [];
  let keySeq = 0;
  const newKey = () => `plain-interop-${process.pid}-${++keySeq}`;

  async function service(url = redis.url): Promise<LockService> {
    const backend = await createBackend({ type: 'redis', url, protocol: 'plain' });
    // No module prefix: the lock key is the name the plain client uses.
    const lockService = lockServiceOver(backend, { keyPrefix: '' });
    services.push(lockService);
    // Connected and subscribed before the case measures anything.
    await (await lockService.acquire(`warm-up-${newKey()}`)).release();
    return lockService;
  }

  before(async () => {
    [redis, notifying] = await Promise.all([startRedisServer(), startRedisServer(['--notify-keyspace-events', 'Kgx'])]);
    raw = new Redis(redis.url);
  });
  after(async () => {
    await Promise.all(services.map((each) => each.onApplicationShutdown()));
    raw?.disconnect();
    await Promise.all([redis?.stop(), notifying?.stop()]);
  });

  it('waits while the plain client holds, and takes the lock after its release within the retry bound', async (t) => {
    const ours = await service();
    const key = newKey();
    const theirs = new SeedRedisLock(raw, key);
    assert.ok(await theirs.tryLock(30_000));
    const waiting = ours.acquire(key, { waitTimeoutMs: 10_000 });
    await sleep(300);
    assert.equal(await theirs.unlock(), true);
    const releasedAt = performance.now();
    const lock = await waiting;
    const delayMs = performance.now() - releasedAt;
    t.diagnostic(`granted ${Math.round(delayMs)} ms after the plain client's release (bound ${RETRY_CAP_MS} + ${MARGIN_MS} ms: no keyspace events)`);
    assert.ok(delayMs <= RETRY_CAP_MS + MARGIN_MS, `granted ${Math.round(delayMs)} ms after the release`);
    assert.equal(await theirs.tryLock(30_000), false, 'the plain client took the lock we hold');
    await lock.release();
    assert.equal(await theirs.tryLock(30_000), true, 'the plain client could not take the lock after our release');
    await theirs.unlock();
  });

  it('sees the release at once when the server publishes keyspace events (del, expired)', async (t) => {
    const ours = await service(notifying.url);
    const client = new Redis(notifying.url);
    try {
      const key = newKey();
      const theirs = new SeedRedisLock(client, key);
      assert.ok(await theirs.tryLock(30_000));
      const waiting = ours.acquire(key, { waitTimeoutMs: 10_000 });
      await sleep(400);
      assert.equal(await theirs.unlock(), true);
      const releasedAt = performance.now();
      const lock = await waiting;
      const delayMs = performance.now() - releasedAt;
      const boundMs = 50 + MARGIN_MS / 3;
      t.diagnostic(`granted ${Math.round(delayMs)} ms after the plain client's release (bound ${boundMs} ms, keyspace event)`);
      assert.ok(delayMs <= boundMs, `granted ${Math.round(delayMs)} ms after the release`);
      await lock.release();

      // A plain lock that expires (its holder died): the expired event wakes the waiter.
      assert.ok(await theirs.tryLock(700));
      const expiring = performance.now();
      const next = await ours.acquire(key, { waitTimeoutMs: 10_000 });
      const afterMs = performance.now() - expiring;
      t.diagnostic(`granted ${Math.round(afterMs)} ms after a 700 ms plain lock was taken (bound 700 + ${MARGIN_MS} ms)`);
      assert.ok(afterMs <= 700 + MARGIN_MS, `granted ${Math.round(afterMs)} ms after`);
      await next.release();
    } finally {
      client.disconnect();
    }
  });

  it('never overlaps with plain clients in a mixed loop, and our tokens increase', async (t) => {
    const key = newKey();
    const ourServices = await Promise.all([service(), service()]);
    const plainClients = [new Redis(redis.url), new Redis(redis.url)];
    const intervals: HoldInterval[] = [];
    const ourIntervals: HoldInterval[] = [];
    const rounds = 25;
    const hold = async () => {
      const start = process.hrtime.bigint();
      await sleep(2);
      return start;
    };
    const ourLoops = ourServices.map(async (lockService, index) => {
      for (let round = 0; round < rounds; round++) {
        await lockService.withLock(key, async (lock) => {
          const start = await hold();
          const interval = { start, end: process.hrtime.bigint(), fencingToken: lock.fencingToken, holder: `ours-${index}` };
          intervals.push(interval);
          ourIntervals.push(interval);
        }, { waitTimeoutMs: 20_000 });
      }
    });
    const plainLoops = plainClients.map(async (client, index) => {
      for (let round = 0; round < rounds; round++) {
        const theirs = new SeedRedisLock(client, key);
        while (!(await theirs.tryLock(10_000))) await sleep(5);
        const start = await hold();
        intervals.push({ start, end: process.hrtime.bigint(), fencingToken: 0n, holder: `plain-${index}` });
        assert.equal(await theirs.unlock(), true, 'the plain client lost its lock');
      }
    });
    try {
      await Promise.all([...ourLoops, ...plainLoops]);
    } finally {
      plainClients.forEach((client) => client.disconnect());
    }
    t.diagnostic(`${intervals.length} holds (${ourIntervals.length} ours), no overlap checked`);
    assertExclusive(intervals, { tokens: false });
    assertExclusive(ourIntervals);
  });

  it('leaves the lock key as plain clients expect: our value, the lease as PX, nothing else in it', async () => {
    const ours = await service();
    const key = newKey();
    const lock = await ours.acquire(key, { ttlMs: 5_000 });
    assert.equal(await raw.type(key), 'string');
    const pttl = await raw.pttl(key);
    assert.ok(pttl > 0 && pttl <= 5_000, `PTTL ${pttl}`);
    assert.match((await raw.get(key))!, /^\d+ \S+$/);
    await lock.release();
    assert.equal(await raw.exists(key), 0);
  });
});

describe("redis protocol 'plain' on Redis Cluster", () => {
  let redis: RedisServer;
  let cluster: Cluster;
  const names = ['plain', 'a}b', '}starts', '{wrapped}', 'x{y}z', '{}', '}', 'lock:orders'];

  before(async () => {
    redis = await startRedisServer(['--cluster-enabled', 'yes', '--cluster-config-file', 'nodes.conf', '--cluster-announce-ip', '127.0.0.1']);
    const admin = new Redis(redis.url);
    await admin.call('CLUSTER', 'ADDSLOTSRANGE', '0', '16383');
    while (!((await admin.call('CLUSTER', 'INFO')) as string).includes('cluster_state:ok')) await sleep(50);
    admin.disconnect();
    cluster = new Cluster([{ host: '127.0.0.1', port: redis.port }]);
  });
  after(async () => {
    cluster?.disconnect();
    await redis?.stop();
  });

  it("puts the fence and waiter keys in the lock key's slot without touching the lock key's name", async () => {
    for (const name of names) {
      const keys = plainLockKeys(name);
      assert.equal(keys.lock, name);
      const slots = await Promise.all(keys.all.map((key) => cluster.call('CLUSTER', 'KEYSLOT', key)));
      assert.equal(new Set(slots).size, 1, `the keys of "${name}" span slots ${slots.join(', ')}`);
      assert.equal(keySlot(name), slots[0], `our slot of "${name}" is not Redis'`);
    }
  });

  it('takes, waits for, hands on and releases every awkward name on a Cluster client', async () => {
    const backends = [await createBackend({ type: 'redis', client: cluster, protocol: 'plain' }), await createBackend({ type: 'redis', client: cluster, protocol: 'plain' })];
    const services = backends.map((backend) => lockServiceOver(backend, { keyPrefix: '' }));
    try {
      for (const name of names) {
        const holder = await services[0].acquire(name);
        const waiter = services[1].acquire(name, { waitTimeoutMs: 5_000 });
        assert.equal(await services[1].tryAcquire(name), null);
        await holder.extend();
        await holder.release();
        const next = await waiter;
        assert.ok(next.fencingToken > holder.fencingToken, name);
        await next.release();
      }
    } finally {
      await Promise.all(services.map((each) => each.onApplicationShutdown()));
      await Promise.all(backends.map((backend) => backend.close()));
    }
  });
});
