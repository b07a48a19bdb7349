import { startPostgresServer } from '../../servers/postgres-server';
import { PostgresStockStore } from '../inventory/postgres-stock.store';
import type { SampleBackend } from './sample-backend';

/** PostgreSQL for both the lock and the stock: POSTGRES_URL if set, else a throwaway server. */
export const postgresSampleBackend: SampleBackend = {
  multiProcess: true,
  async provision() {
    if (process.env.POSTGRES_URL) return { connection: { url: process.env.POSTGRES_URL }, stop: async () => undefined };
    const server = await startPostgresServer();
    return { connection: { url: server.url }, stop: () => server.stop() };
  },
  lockBackend: (connection) => ({ type: 'postgres', url: connection.url }),
  // pg is loaded only when this backend is chosen, like the library's own backend.
  stockStore: (connection) => PostgresStockStore.connect(connection.url),
};
