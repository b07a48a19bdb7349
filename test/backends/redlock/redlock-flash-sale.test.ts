import assert from 'node:assert/strict';
import { Redis } from 'ioredis';
import { after, describe, it } from 'node:test';
import { RedisMasters } from '../../../servers/redis-masters';
import { assertSoldExactly, assertWentWrong, runCrossProcessSale } from '../../support/cross-process-sale';
import { FAULT_SUITE_TIMEOUT_MS, sleep } from '../../support/timing';

/**
 * The sample app's flash sale across 4 processes on Redlock: the stock lives on master 0 and is
 * read, decided on and written back in separate round trips, so only the lock keeps it from
 * being oversold. One master (not the stock's) is killed while the sale runs.
 */
describe('redlock flash sale across processes', { timeout: FAULT_SUITE_TIMEOUT_MS }, () => {
  const running: RedisMasters[] = [];
  after(async () => {
    await Promise.all(running.map((masters) => masters.stop()));
  });

  for (const count of [3, 5]) {
    it(`sells exactly the stock to 600 buyers in 4 processes over ${count} masters, one killed during the sale`, async (t) => {
      const masters = await RedisMasters.start(count);
      running.push(masters);
      const stock = new Redis(masters.urls[0]);
      const sale = runCrossProcessSale('redlock', { REDLOCK_URLS: masters.urls.join(',') }, '--buyers', '600', '--stock', '400');
      // Killed once the first sales are written, while buyers are still waiting.
      let left = Infinity;
      for (const started = Date.now(); Date.now() - started < 60_000; await sleep(5)) {
        left = Number((await stock.hget('inventory:{flash-sale-item}:stock', 'stock').catch(() => null)) ?? Infinity);
        if (left < 390) break;
      }
      await masters.masters[count - 1].server.stop('SIGKILL');
      t.diagnostic(`master ${masters.addresses[count - 1]} killed with ${left} items left`);
      const report = await sale;
      stock.disconnect();
      t.diagnostic(`makespan ${report.makespanMs} ms, ${report.criticalSectionsPerSecond} cs/s, wait p50 ${report.waitP50Ms} ms p99 ${report.waitP99Ms} ms`);
      assert.ok(left > 0 && left < 400, `the kill did not fall during the sale (${left} left)`);
      assertSoldExactly(report, 'redlock');
    });
  }

  it('oversells the same sale without the lock, so the test above can fail', async () => {
    const masters = await RedisMasters.start(3);
    running.push(masters);
    assertWentWrong(await runCrossProcessSale('redlock', { REDLOCK_URLS: masters.urls.join(',') }, '--buyers', '200', '--stock', '150', '--no-lock'));
  });
});
