import { RedisMasters } from '../../servers/redis-masters';
import { RedisStockStore } from '../inventory/redis-stock.store';
import type { SampleBackend } from './sample-backend';

/**
 * Redlock over the masters named by REDLOCK_URLS (comma-separated), else 3 throwaway
 * redis-servers. The stock lives on the first master: it is the sale's storage, not part of the lock.
 */
export const redlockSampleBackend: SampleBackend = {
  multiProcess: true,
  async provision() {
    if (process.env.REDLOCK_URLS) return { connection: { urls: process.env.REDLOCK_URLS }, stop: async () => undefined };
    const masters = await RedisMasters.start(3);
    return { connection: { urls: masters.urls.join(',') }, stop: () => masters.stop() };
  },
  lockBackend: (connection) => ({ type: 'redlock', urls: connection.urls.split(',') }),
  // ioredis is loaded only when this backend is chosen, like the library's own backend.
  stockStore: async (connection) => new RedisStockStore(new (await import('ioredis')).Redis(connection.urls.split(',')[0])),
};
