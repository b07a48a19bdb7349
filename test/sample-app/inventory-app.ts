import type { INestApplication } from '@nestjs/common';
import { NestFactory } from '@nestjs/core';
import type { BackendOptions, LockOptions } from '../../lib';
import { AppModule } from '../../sample-app/app.module';
import { MemoryStockStore } from '../../sample-app/inventory/memory-stock.store';
import type { StockStore } from '../../sample-app/inventory/stock-store';

export interface InventoryApp {
  app: INestApplication;
  call(method: string, route: string, body?: unknown): Promise<Response>;
  close(): Promise<void>;
}

/**
 * The sample app over HTTP on a free loopback port, as `npm run start:http` serves it. One at a
 * time: @WithLock uses the newest running app's LockService.
 */
export async function startInventoryApp(
  options: { backend?: BackendOptions; store?: StockStore; lockOptions?: LockOptions } = {},
): Promise<InventoryApp> {
  const { backend = { type: 'memory' }, store = new MemoryStockStore(), lockOptions = {} } = options;
  const app = await NestFactory.create(AppModule.register(backend, store, lockOptions), { logger: false });
  await app.listen(0, '127.0.0.1');
  const url = (await app.getUrl()).replace('[::1]', '127.0.0.1');
  return {
    app,
    call: (method, route, body) =>
      fetch(`${url}${route}`, { method, headers: { 'content-type': 'application/json' }, body: body === undefined ? undefined : JSON.stringify(body) }),
    close: () => app.close(),
  };
}
