import 'reflect-metadata';
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { LockService } from '../../lib';
import { startRedisServer } from '../../servers/redis-server';
import { HolderProcess } from '../support/holder-process';
import { eventually } from '../support/timing';
import { startInventoryApp } from './inventory-app';

/** One sample's value from Prometheus text, 0 when absent. */
function sample(text: string, series: string): number {
  const line = text.split('\n').find((each) => each.startsWith(`${series} `));
  return line === undefined ? 0 : Number(line.slice(series.length + 1));
}

describe('the sample app over HTTP: GET /health, GET /metrics and GET /locks/:name', () => {
  it('GET /health answers 200 with the lock backend up and its round trip', async () => {
    const inventory = await startInventoryApp();
    try {
      const response = await inventory.call('GET', '/health');
      const body = (await response.json()) as { status: string; info: { lock: { status: string; backend: string; roundTripMs: number } } };
      assert.equal(response.status, 200);
      assert.equal(body.status, 'ok');
      assert.equal(body.info.lock.status, 'up');
      assert.equal(body.info.lock.backend, 'memory');
      assert.equal(typeof body.info.lock.roundTripMs, 'number');
    } finally {
      await inventory.close();
    }
  });

  it('GET /metrics counts purchases, busy answers and holds, with no lock name among the labels', async () => {
    const inventory = await startInventoryApp({ lockOptions: { waitTimeoutMs: 30 } });
    try {
      const metrics = async () => {
        const response = await inventory.call('GET', '/metrics');
        assert.equal(response.status, 200);
        assert.match(response.headers.get('content-type') ?? '', /^text\/plain/);
        return response.text();
      };
      const before = await metrics();
      await inventory.call('PUT', '/inventory/pear', { stock: 10 });
      for (const user of ['ann', 'bob', 'cy']) assert.equal((await inventory.call('POST', '/inventory/pear/buy', { user })).status, 201);
      const held = await inventory.app.get(LockService).acquire('stock:pear');
      assert.equal((await inventory.call('POST', '/inventory/pear/buy', { user: 'dee' })).status, 423);
      const during = await metrics();
      await held.release();
      const after = await metrics();

      const acquired = 'distributed_lock_acquire_seconds_count{backend="memory",mode="write",outcome="acquired"}';
      const timedOut = 'distributed_lock_acquire_seconds_count{backend="memory",mode="write",outcome="timeout"}';
      // The seed, three purchases and the test's own acquire.
      assert.equal(sample(after, acquired) - sample(before, acquired), 5);
      assert.equal(sample(after, timedOut) - sample(before, timedOut), 1);
      assert.equal(sample(during, 'distributed_lock_held{backend="memory",mode="write"}'), 1);
      assert.equal(sample(after, 'distributed_lock_held{backend="memory",mode="write"}'), 0);
      assert.equal(sample(after, 'distributed_lock_waiting{backend="memory",mode="write"}'), 0);
      assert.equal(sample(after, 'distributed_lock_hold_seconds_count{backend="memory",mode="write"}') - sample(before, 'distributed_lock_hold_seconds_count{backend="memory",mode="write"}'), 5);
      assert.match(after, /# TYPE distributed_lock_lost_total counter/);
      assert.doesNotMatch(after, /pear/, 'a lock name must never be a label');
    } finally {
      await inventory.close();
    }
  });

  it('GET /locks/:name shows the holder with its token as a string, and the callers waiting', async () => {
    const inventory = await startInventoryApp();
    const locks = inventory.app.get(LockService);
    const view = async () => {
      const response = await inventory.call('GET', '/locks/stock:pear');
      assert.equal(response.status, 200);
      return (await response.json()) as { name: string; held: boolean; holder?: { owner: string; fencingToken: string; heldForMs?: number; expiresInMs?: number }; waiting: number };
    };
    try {
      assert.deepEqual(await view(), { name: 'stock:pear', held: false, waiting: 0 });
      const held = await locks.acquire('stock:pear');
      // A caller of the holder's own tick would share its entry, and the store counts entries: this one queues its own.
      await new Promise((resolve) => setImmediate(resolve));
      const waiter = locks.acquire('stock:pear', { waitTimeoutMs: 10_000 });
      const body = await view();
      assert.equal(body.held, true);
      assert.equal(body.holder?.fencingToken, held.fencingToken.toString());
      assert.equal(typeof body.holder?.owner, 'string');
      assert.equal(typeof body.holder?.heldForMs, 'number');
      assert.equal(body.waiting, 1);
      await held.release();
      const next = await waiter;
      assert.equal((await view()).holder?.fencingToken, next.fencingToken.toString());
      await next.release();
      assert.equal((await view()).held, false);
      assert.equal((await inventory.call('POST', '/locks/stock:pear')).status, 404, 'the sample app must not expose forceRelease');
      const reader = await locks.acquire('catalog:tea', { mode: 'read' });
      const readers = (await (await inventory.call('GET', '/locks/catalog:tea')).json()) as { mode: string; holders: { fencingToken: string }[] };
      assert.equal(readers.mode, 'read');
      assert.deepEqual(readers.holders.map((holder) => holder.fencingToken), [reader.fencingToken.toString()]);
      await reader.release();
    } finally {
      await inventory.close();
    }
  });

  it("GET /locks/:name shows another process's lock, from the Redis server", async () => {
    const redis = await startRedisServer();
    const backend = { type: 'redis', url: redis.url } as const;
    const inventory = await startInventoryApp({ backend });
    const holder = await HolderProcess.withModule({ backend });
    try {
      const token = await holder.acquire('stock:plum');
      const response = await inventory.call('GET', '/locks/stock:plum');
      assert.equal(response.status, 200);
      const body = (await response.json()) as { held: boolean; holder?: { fencingToken: string; expiresInMs?: number }; waiting: number };
      assert.equal(body.held, true);
      assert.equal(body.holder?.fencingToken, token.toString());
      assert.equal(typeof body.holder?.expiresInMs, 'number');
      assert.equal(body.waiting, 0);
      await holder.release();
      await eventually(async () => !((await (await inventory.call('GET', '/locks/stock:plum')).json()) as { held: boolean }).held, 5_000, 'the lock free');
    } finally {
      await holder.stop();
      await inventory.close();
      await redis.stop();
    }
  });
});
