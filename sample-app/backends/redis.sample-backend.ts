import { startRedisServer } from '../../servers/redis-server';
import { RedisStockStore } from '../inventory/redis-stock.store';
import type { SampleBackend } from './sample-backend';

/** Redis for both the lock and the stock: REDIS_URL if set, else a throwaway redis-server. */
export const redisSampleBackend: SampleBackend = {
  multiProcess: true,
  async provision() {
    if (process.env.REDIS_URL) return { connection: { url: process.env.REDIS_URL }, stop: async () => undefined };
    const server = await startRedisServer();
    return { connection: { url: server.url }, stop: () => server.stop() };
  },
  lockBackend: (connection) => ({ type: 'redis', url: connection.url }),
  // ioredis is loaded only when this backend is chosen, like the library's own backend.
  stockStore: async (connection) => new RedisStockStore(new (await import('ioredis')).Redis(connection.url)),
};
