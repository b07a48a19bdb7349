import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { assertSoldExactly, assertWentWrong, runCrossProcessSale } from '../../support/cross-process-sale';
import { startZooKeeperServer, type ZooKeeperServer } from '../../../servers/zookeeper-server';
import { ZooKeeperInspector } from './zookeeper-inspect';

/**
 * The sample app's flash sale across 4 processes, each its own Nest app, on one ZooKeeper: the
 * stock lives in a ZooKeeper node and is read, decided on and written back in separate round
 * trips under @WithLock('stock:<0>'), so only the lock keeps it from being oversold.
 */
describe('flash sale on ZooKeeper, across processes', () => {
  let zookeeper: ZooKeeperServer;
  before(async () => {
    zookeeper = await startZooKeeperServer();
  });
  after(async () => {
    await zookeeper?.stop();
  });

  const flashSale = (...flags: string[]) => runCrossProcessSale('zookeeper', { ZOOKEEPER_CONNECT: zookeeper.connectionString }, ...flags);

  it('4 buyer processes, 200 buyers, 150 items: never oversold, winners exact, a stale token refused', async (t) => {
    const sale = await flashSale('--buyers', '200', '--stock', '150');
    t.diagnostic(`makespan ${sale.makespanMs} ms, ${sale.criticalSectionsPerSecond} cs/s, wait p50 ${sale.waitP50Ms} ms p99 ${sale.waitP99Ms} ms`);
    assertSoldExactly(sale, 'zookeeper');
    // Every buyer process closed its session: no lock node is left behind.
    const inspector = await ZooKeeperInspector.connect(zookeeper.connectionString);
    try {
      assert.deepEqual(await inspector.lockNodes('/distributed-lock'), []);
    } finally {
      inspector.close();
    }
  });

  it('goes wrong in the same sale without the lock, so the test above can fail', async () => {
    const sale = await flashSale('--buyers', '200', '--stock', '150', '--no-lock');
    assertWentWrong(sale);
  });
});
