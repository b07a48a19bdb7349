import { after, before, describe, it } from 'node:test';
import { assertSoldExactly, assertWentWrong, runCrossProcessSale } from '../../support/cross-process-sale';
import { startRedisServer, type RedisServer } from '../../../servers/redis-server';

/**
 * The sample app's flash sale across 4 processes, each its own Nest app, on one Redis: the stock
 * lives in Redis and is read, decided on and written back in separate round trips under
 * @WithLock('stock:<0>'), so only the lock keeps it from being oversold.
 */
describe('redis flash sale across processes', () => {
  let redis: RedisServer;
  before(async () => (redis = await startRedisServer()));
  after(() => redis.stop());

  const flashSale = (...flags: string[]) => runCrossProcessSale('redis', { REDIS_URL: redis.url }, ...flags);

  it('sells exactly the stock to 200 buyers in 4 processes: never oversold, winners exact', async (t) => {
    const sale = await flashSale('--buyers', '200', '--stock', '150');
    t.diagnostic(`makespan ${sale.makespanMs} ms, ${sale.criticalSectionsPerSecond} cs/s, wait p50 ${sale.waitP50Ms} ms p99 ${sale.waitP99Ms} ms`);
    assertSoldExactly(sale, 'redis');
  });

  it('oversells the same sale without the lock, so the test above can fail', async () => {
    const sale = await flashSale('--buyers', '200', '--stock', '150', '--no-lock');
    assertWentWrong(sale);
  });
});
