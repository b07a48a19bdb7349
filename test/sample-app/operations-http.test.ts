import 'reflect-metadata';
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { LockService } from '../../lib';
import { startInventoryApp } from './inventory-app';

/** One sample's value from Prometheus text, 0 when absent. */
function sample(text: string, series: string): number {
  const line = text.split('\n').find((each) => each.startsWith(`${series} `));
  return line === undefined ? 0 : Number(line.slice(series.length + 1));
}

describe('the sample app over HTTP: GET /health and GET /metrics', () => {
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

      const acquired = 'distributed_lock_acquire_seconds_count{backend="memory",outcome="acquired"}';
      const timedOut = 'distributed_lock_acquire_seconds_count{backend="memory",outcome="timeout"}';
      // The seed, three purchases and the test's own acquire.
      assert.equal(sample(after, acquired) - sample(before, acquired), 5);
      assert.equal(sample(after, timedOut) - sample(before, timedOut), 1);
      assert.equal(sample(during, 'distributed_lock_held{backend="memory"}'), 1);
      assert.equal(sample(after, 'distributed_lock_held{backend="memory"}'), 0);
      assert.equal(sample(after, 'distributed_lock_waiting{backend="memory"}'), 0);
      assert.equal(sample(after, 'distributed_lock_hold_seconds_count{backend="memory"}') - sample(before, 'distributed_lock_hold_seconds_count{backend="memory"}'), 5);
      assert.match(after, /# TYPE distributed_lock_lost_total counter/);
      assert.doesNotMatch(after, /pear/, 'a lock name must never be a label');
    } finally {
      await inventory.close();
    }
  });
});
