import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { Cluster, Redis } from 'ioredis';
import type { LockService } from '../../../lib';
import type { LockBackend } from '../../../lib/backends/lock-backend.interface';
import { createBackend } from '../../../lib/backends/registry';
import { keyList, lockKeys } from '../../../lib/backends/redis/redis-keys';
import { lockServiceOver } from '../../support/lock-service-factory';
import { startRedisServer, type RedisServer } from '../../../servers/redis-server';
import { eventually, sleep } from '../../support/timing';

/** Names that would break a naive `{name}` tag: a `}` ends the tag early, `{}` disables it. */
const AWKWARD_NAMES = ['plain', 'a}b', '}starts', '{wrapped}', 'x{y}z', '%7D', '}'];

/**
 * A one-node Redis Cluster (all 16384 slots on one server): enough to prove every script names
 * keys of a single slot, since Cluster refuses a script whose keys span slots (CROSSSLOT).
 */
describe('redis backend on Redis Cluster', () => {
  let redis: RedisServer;
  let cluster: Cluster;
  let services: LockService[];
  let backends: LockBackend[];

  before(async () => {
    redis = await startRedisServer(['--cluster-enabled', 'yes', '--cluster-config-file', 'nodes.conf', '--cluster-announce-ip', '127.0.0.1']);
    const admin = new Redis(redis.url);
    await admin.call('CLUSTER', 'ADDSLOTSRANGE', '0', '16383');
    while (!(await admin.call('CLUSTER', 'INFO') as string).includes('cluster_state:ok')) await sleep(50);
    admin.disconnect();
    cluster = new Cluster([{ host: '127.0.0.1', port: redis.port }]);
    backends = [await createBackend({ type: 'redis', client: cluster }), await createBackend({ type: 'redis', client: cluster })];
    // No key prefix: a name's first character is the tag's first character.
    services = backends.map((backend) => lockServiceOver(backend, { keyPrefix: '' }));
  });
  after(async () => {
    await Promise.all(services.map((service) => service.onApplicationShutdown()));
    cluster.disconnect();
    await redis.stop();
  });

  it('puts all keys of a name in one slot, whatever braces the name holds', async () => {
    for (const name of [...AWKWARD_NAMES, ...AWKWARD_NAMES.map((n) => `lock:${n}`)]) {
      const keys = lockKeys(name);
      const slots = new Set(await Promise.all([...keyList(keys), keys.holders, keys.grants].map((key) => cluster.call('CLUSTER', 'KEYSLOT', key))));
      assert.equal(slots.size, 1, `the keys of "${name}" span slots ${[...slots].join(', ')}`);
    }
  });

  it("keeps each process's holder description in one slot, so one script reads every holder's", async () => {
    const settings = (holderDescription: string) => ({ ttlMs: 30_000, serverTimeoutMs: 5_000, keyPrefix: 'lock:', holderDescription });
    const pods = [
      lockServiceOver(await createBackend({ type: 'redis', client: cluster }, settings('cluster-pod-a'))),
      lockServiceOver(await createBackend({ type: 'redis', client: cluster }, settings('cluster-pod-b'))),
    ];
    try {
      const handles = await Promise.all(pods.map((pod) => pod.acquire('described', { mode: 'read' })));
      // Two records, two keys: a script naming both is refused (CROSSSLOT) unless they share a slot.
      await eventually(async () => {
        const seen = await pods[0].inspect('described');
        return seen.holders?.map((holder) => holder.description).sort().join() === 'cluster-pod-a,cluster-pod-b';
      }, 5_000, 'both descriptions', 20);
      await Promise.all(handles.map((handle) => handle.release()));
    } finally {
      await Promise.all(pods.map((pod) => pod.onApplicationShutdown()));
    }
  });

  it('locks several names that live in different slots at once (one script per name), in either order', async () => {
    const names = ['account:a', 'account:b'];
    const slots = await Promise.all(names.map((name) => cluster.call('CLUSTER', 'KEYSLOT', lockKeys(name).owner)));
    assert.notEqual(slots[0], slots[1], 'the two names share a slot: pick names that do not');
    let inside = 0;
    const transfers = Array.from({ length: 20 }, (_, i) =>
      services[i % 2].withLock(i % 2 ? names : [...names].reverse(), async (lock) => {
        assert.equal(++inside, 1, 'two holders of both names at once');
        assert.deepEqual([...lock.fencingTokens.keys()].sort(), names);
        await sleep(1);
        inside--;
      }),
    );
    await Promise.all(transfers);
  });

  it('acquires, queues, hands off, renews and releases on a Cluster client', async () => {
    for (const name of AWKWARD_NAMES) {
      const holder = await services[0].acquire(name);
      const waiter = services[1].acquire(name, { waitTimeoutMs: 5_000 });
      assert.equal(await services[1].tryAcquire(name), null);
      await holder.extend();
      await holder.release();
      const next = await waiter;
      assert.ok(next.fencingToken > holder.fencingToken, name);
      await next.release();
    }
  });

  it('queues a burst in one script and hands over inside a process on a Cluster client', async () => {
    for (const name of AWKWARD_NAMES) {
      const holder = await services[0].acquire(name);
      const served: number[] = [];
      const burst = Array.from({ length: 4 }, (_, i) => services[0].withLock(name, () => void served.push(i), { waitTimeoutMs: 5_000 }));
      await sleep(50);
      await holder.release();
      await Promise.all(burst);
      assert.deepEqual(served, [0, 1, 2, 3], name);
    }
  });

  it('grants readers and permits, queued behind a writer, on a Cluster client', async () => {
    const signal = new AbortController().signal;
    for (const name of AWKWARD_NAMES) {
      const writer = await backends[0].acquire({ key: name, owner: `w-${name}`, ttlMs: 5_000, signal });
      const readers = [0, 1].map((i) => backends[i].acquire({ key: name, owner: `r${i}-${name}`, ttlMs: 5_000, signal, mode: 'read' }));
      await sleep(50);
      await backends[0].release(writer);
      const granted = await Promise.all(readers);
      assert.equal((await backends[1].inspect!(name)).holders?.length, 2, name);
      await Promise.all(granted.map((grant, i) => backends[i].release(grant)));
      const permit = await backends[1].acquire({ key: name, owner: `p-${name}`, ttlMs: 5_000, signal, mode: 'permit', limit: 1 });
      assert.ok(permit.fencingToken > granted[1].fencingToken && (await backends[1].renew(permit, 5_000)), name);
      await backends[1].release(permit);
    }
  });

  it('keeps names apart that differ only by braces or by their encoding', async () => {
    const held = await Promise.all(AWKWARD_NAMES.map((name) => services[0].tryAcquire(name)));
    assert.ok(held.every(Boolean), 'two different names shared one lock');
    await Promise.all(held.map((lock) => lock!.release()));
  });
});
