import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { runSql, startPostgresServer, type PostgresServer } from '../../../servers/postgres-server';
import { assertSoldExactly, assertWentWrong, runCrossProcessSale } from '../../support/cross-process-sale';

/**
 * The sample app's flash sale across 4 processes, each its own Nest app, on one PostgreSQL: the
 * stock lives in a table and is read, decided on and written back in separate statements under
 * @WithLock('stock:<0>'), so only the lock keeps it from being oversold.
 */
describe('flash sale on PostgreSQL, across processes', () => {
  let postgres: PostgresServer;
  before(async () => {
    postgres = await startPostgresServer();
  });
  after(async () => {
    await postgres?.stop();
  });

  const flashSale = (...flags: string[]) => runCrossProcessSale('postgres', { POSTGRES_URL: postgres.url }, ...flags);

  it('4 buyer processes, 200 buyers, 150 items: never oversold, winners exact, a stale token refused', async (t) => {
    const sale = await flashSale('--buyers', '200', '--stock', '150');
    t.diagnostic(`makespan ${sale.makespanMs} ms, ${sale.criticalSectionsPerSecond} cs/s, wait p50 ${sale.waitP50Ms} ms p99 ${sale.waitP99Ms} ms`);
    assertSoldExactly(sale, 'postgres');
    // Every buyer process released what it held and left the queue: nothing is left behind (a
    // released name keeps its row, free: owner NULL, for the next taker's in-place update).
    assert.deepEqual(await runSql(postgres.url, 'SELECT name FROM distributed_locks WHERE owner IS NOT NULL OR contended'), []);
    assert.deepEqual(await runSql(postgres.url, 'SELECT name FROM distributed_locks_queue'), []);
  });

  it('goes wrong in the same sale without the lock, so the test above can fail', async () => {
    const sale = await flashSale('--buyers', '200', '--stock', '150', '--no-lock');
    assertWentWrong(sale);
  });
});
