import 'reflect-metadata';
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { LockService } from '../../lib';
import { startInventoryApp, type InventoryApp } from './inventory-app';

describe('inventory app over HTTP (memory backend)', () => {
  let inventory: InventoryApp;

  before(async () => {
    inventory = await startInventoryApp({ lockOptions: { waitTimeoutMs: 300 } });
  });
  after(() => inventory.close());

  it('sells exactly the seeded stock to concurrent buyers (201 won, 410 sold out) and lists who won', async () => {
    assert.equal((await inventory.call('PUT', '/inventory/pear', { stock: 5 })).status, 204);
    const users = Array.from({ length: 20 }, (_, i) => `u${i}`);
    const statuses = await Promise.all(users.map((user) => inventory.call('POST', '/inventory/pear/buy', { user }).then((r) => r.status)));
    assert.equal(statuses.filter((s) => s === 201).length, 5);
    assert.equal(statuses.filter((s) => s === 410).length, 15);
    const won = users.filter((_, i) => statuses[i] === 201);
    const view = (await (await inventory.call('GET', '/inventory/pear')).json()) as { stock: number; lucky: number; winners: string[] };
    assert.deepEqual({ ...view, winners: [...view.winners].sort() }, { stock: 0, lucky: 5, winners: won.sort() });
  });

  it('maps a lock wait timeout to 423 with Retry-After, through the app filter', async () => {
    await inventory.call('PUT', '/inventory/fig', { stock: 1 });
    const held = await inventory.app.get(LockService).acquire('stock:fig');
    try {
      const response = await inventory.call('POST', '/inventory/fig/buy', { user: 'late' });
      assert.equal(response.status, 423);
      assert.equal(response.headers.get('retry-after'), '1');
      assert.equal(((await response.json()) as { error: string }).error, 'LockTimeoutError');
    } finally {
      await held.release();
    }
    assert.equal((await inventory.call('POST', '/inventory/fig/buy', { user: 'next' })).status, 201);
  });

  it('rejects a bad seed or buyer with 400', async () => {
    assert.equal((await inventory.call('PUT', '/inventory/plum', { stock: -1 })).status, 400);
    assert.equal((await inventory.call('POST', '/inventory/plum/buy', { user: 42 })).status, 400);
  });
});
