import 'reflect-metadata';
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { LockService, MemoryLockBackend, type LockGrant } from '../../lib';
import { MemoryStockStore } from '../../sample-app/inventory/memory-stock.store';
import type { StockRecord } from '../../sample-app/inventory/stock-store';
import { countingBackend } from '../support/counting-backend';
import { startInventoryApp, type InventoryApp } from './inventory-app';

/** A memory store whose next read, once it has read, waits to be resumed: a buyer paused mid-purchase (GC, a slow disk). */
class PausingStockStore extends MemoryStockStore {
  private pause?: { reached(): void; resumed: Promise<void> };

  pauseNextRead(): { reached: Promise<void>; resume(): void } {
    let resume!: () => void;
    const resumed = new Promise<void>((resolve) => (resume = resolve));
    const reached = new Promise<void>((resolve) => (this.pause = { reached: resolve, resumed }));
    return { reached, resume };
  }

  override async read(sku: string): Promise<StockRecord> {
    const record = await super.read(sku);
    const pause = this.pause;
    this.pause = undefined;
    pause?.reached();
    await pause?.resumed;
    return record;
  }
}

/** A lock server that cannot be reached: every acquisition fails as a client's does when its connection is refused. */
class UnreachableBackend extends MemoryLockBackend {
  override async acquire(): Promise<LockGrant> {
    throw connectionRefused();
  }

  override async tryAcquire(): Promise<LockGrant | null> {
    throw connectionRefused();
  }
}

const connectionRefused = () => Object.assign(new Error('connect ECONNREFUSED 127.0.0.1:6379'), { code: 'ECONNREFUSED' });

async function errorOf(response: Response): Promise<{ status: number; error: string; message: string; lock?: string; retryAfter: string | null }> {
  const body = (await response.json()) as { error: string; message: string; lock?: string };
  return { status: response.status, error: body.error, message: body.message, lock: body.lock, retryAfter: response.headers.get('retry-after') };
}

async function withInventory(options: Parameters<typeof startInventoryApp>[0], test: (inventory: InventoryApp) => Promise<void>): Promise<void> {
  const inventory = await startInventoryApp(options);
  try {
    await test(inventory);
  } finally {
    await inventory.close();
  }
}

describe('the exported LockExceptionFilter maps each lock error to HTTP (the sample app, memory backend)', () => {
  it('423 LockTimeoutError with Retry-After: the lock stays busy past waitTimeoutMs', async () => {
    await withInventory({ lockOptions: { waitTimeoutMs: 50 } }, async (inventory) => {
      await inventory.call('PUT', '/inventory/fig', { stock: 3 });
      const held = await inventory.app.get(LockService).acquire('stock:fig');
      try {
        const answer = await errorOf(await inventory.call('POST', '/inventory/fig/buy', { user: 'ann' }));
        assert.equal(answer.status, 423);
        assert.equal(answer.error, 'LockTimeoutError');
        assert.equal(answer.lock, 'stock:fig');
        assert.equal(answer.retryAfter, '1');
        assert.match(answer.message, /retry/);
      } finally {
        await held.release();
      }
    });
  });

  it('409 LockLostError: the lease ran out while the purchase was paused', async () => {
    const store = new PausingStockStore();
    await withInventory({ store, lockOptions: { ttlMs: 100, renew: false } }, async (inventory) => {
      await inventory.call('PUT', '/inventory/kiwi', { stock: 3 });
      const pause = store.pauseNextRead();
      const buying = inventory.call('POST', '/inventory/kiwi/buy', { user: 'slow' });
      await pause.reached;
      // Granted only once the paused buyer's 100 ms lease has run out.
      await (await inventory.app.get(LockService).acquire('stock:kiwi')).release();
      pause.resume();
      const answer = await errorOf(await buying);
      assert.equal(answer.status, 409);
      assert.equal(answer.error, 'LockLostError');
      assert.equal(answer.lock, 'stock:kiwi');
      assert.match(answer.message, /read the resource before retrying/);
    });
  });

  it('409 StaleFencingTokenError: a buyer paused past its lease writes after a newer holder did, and is refused', async () => {
    const store = new PausingStockStore();
    await withInventory({ store, lockOptions: { ttlMs: 150, renew: false } }, async (inventory) => {
      await inventory.call('PUT', '/inventory/lime', { stock: 5 });
      const pause = store.pauseNextRead();
      const stale = inventory.call('POST', '/inventory/lime/buy', { user: 'paused' });
      await pause.reached;
      // Waits in the queue until the paused buyer's lease runs out, then buys with a higher token.
      assert.equal((await inventory.call('POST', '/inventory/lime/buy', { user: 'fresh' })).status, 201);
      pause.resume();
      const answer = await errorOf(await stale);
      assert.equal(answer.status, 409);
      assert.equal(answer.error, 'StaleFencingTokenError');
      // Both read 5; without the fence the stale write would have sold a second item as the same one.
      assert.deepEqual(await (await inventory.call('GET', '/inventory/lime')).json(), { stock: 4, lucky: 1, winners: ['fresh'] });
    });
  });

  it('503 LockBackendError: the lock server cannot be reached, and the stock is untouched', async () => {
    const store = new MemoryStockStore();
    await store.seed('plum', 2);
    await withInventory({ store, backend: { type: 'custom', backend: new UnreachableBackend() } }, async (inventory) => {
      const answer = await errorOf(await inventory.call('POST', '/inventory/plum/buy', { user: 'ann' }));
      assert.equal(answer.status, 503);
      assert.equal(answer.error, 'LockBackendError');
      assert.equal(answer.retryAfter, '1');
      assert.match(answer.message, /could not be reached/);
      // The server's address is for the operator's log, not for HTTP clients.
      assert.doesNotMatch(answer.message, /127\.0\.0\.1|ECONNREFUSED/);
      assert.deepEqual(await (await inventory.call('GET', '/inventory/plum')).json(), { stock: 2, lucky: 0, winners: [] });
    });
  });

  it('400 LockKeyError: a blank sku makes no lock name, refused before any backend call', async () => {
    const { backend, calls } = countingBackend(new MemoryLockBackend());
    await withInventory({ backend: { type: 'custom', backend } }, async (inventory) => {
      for (const [method, route, body] of [
        ['POST', '/inventory/%20/buy', { user: 'ann' }],
        ['PUT', '/inventory/%20', { stock: 1 }],
      ] as const) {
        const answer = await errorOf(await inventory.call(method, route, body));
        assert.equal(answer.status, 400, `${method} ${route}`);
        assert.equal(answer.error, 'LockKeyError');
        assert.match(answer.message, /<0>/);
      }
      assert.equal(calls.acquire + calls.tryAcquire, 0);
    });
  });
});
