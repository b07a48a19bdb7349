import 'reflect-metadata';
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import type { INestApplication } from '@nestjs/common';
import { NestFactory } from '@nestjs/core';
import { LockService } from '../../lib';
import { AppModule } from '../../sample-app/app.module';
import { MemoryStockStore } from '../../sample-app/inventory/memory-stock.store';

describe('inventory app over HTTP (memory backend)', () => {
  let app: INestApplication;
  let url: string;

  before(async () => {
    app = await NestFactory.create(AppModule.register({ type: 'memory' }, new MemoryStockStore(), { waitTimeoutMs: 300 }), { logger: false });
    await app.listen(0, '127.0.0.1');
    url = (await app.getUrl()).replace('[::1]', '127.0.0.1');
  });
  after(() => app.close());

  const call = (method: string, route: string, body?: unknown) =>
    fetch(`${url}${route}`, { method, headers: { 'content-type': 'application/json' }, body: body === undefined ? undefined : JSON.stringify(body) });

  it('sells exactly the seeded stock to concurrent buyers (201 won, 410 sold out)', async () => {
    assert.equal((await call('PUT', '/inventory/pear', { stock: 5 })).status, 204);
    const statuses = await Promise.all(Array.from({ length: 20 }, (_, i) => call('POST', '/inventory/pear/buy', { user: `u${i}` }).then((r) => r.status)));
    assert.equal(statuses.filter((s) => s === 201).length, 5);
    assert.equal(statuses.filter((s) => s === 410).length, 15);
    assert.deepEqual(await (await call('GET', '/inventory/pear')).json(), { stock: 0, lucky: 5 });
  });

  it('maps a lock wait timeout to 423 with Retry-After, through the app filter', async () => {
    await call('PUT', '/inventory/fig', { stock: 1 });
    const held = await app.get(LockService).acquire('stock:fig');
    try {
      const response = await call('POST', '/inventory/fig/buy', { user: 'late' });
      assert.equal(response.status, 423);
      assert.equal(response.headers.get('retry-after'), '1');
      assert.equal(((await response.json()) as { error: string }).error, 'LockTimeoutError');
    } finally {
      await held.release();
    }
    assert.equal((await call('POST', '/inventory/fig/buy', { user: 'next' })).status, 201);
  });

  it('rejects a bad seed with 400', async () => {
    assert.equal((await call('PUT', '/inventory/plum', { stock: -1 })).status, 400);
  });
});
