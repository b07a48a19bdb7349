import { NestFactory } from '@nestjs/core';
import type { INestApplicationContext } from '@nestjs/common';
import { AppModule } from '../app.module';
import type { SampleBackend, Connection } from '../backends/sample-backend';
import type { StockStore } from '../inventory/stock-store';

/** One buyer process's Nest application: its own lock client and its own stock store client. */
export async function startSaleApp(
  backend: SampleBackend,
  connection: Connection,
): Promise<{ app: INestApplicationContext; store: StockStore; close(): Promise<void> }> {
  const store = await backend.stockStore(connection);
  const app = await NestFactory.createApplicationContext(AppModule.register(backend.lockBackend(connection), store), {
    logger: ['error'],
  });
  return {
    app,
    store,
    async close() {
      await app.close();
      await store.close();
    },
  };
}
