import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { assertSoldExactly, runCrossProcessSale } from '../../support/cross-process-sale';
import { startZooKeeperServer, type ZooKeeperServer } from '../../support/zookeeper-server';
import { ZooKeeperInspector } from './zookeeper-inspect';

describe('flash sale on ZooKeeper, across processes', () => {
  let zookeeper: ZooKeeperServer;
  before(async () => {
    zookeeper = await startZooKeeperServer();
  });
  after(async () => {
    await zookeeper?.stop();
  });

  it('4 buyer processes, 200 buyers, 150 items: never oversold, winners exact, a stale token refused', async () => {
    const sale = await runCrossProcessSale('zookeeper', { ZOOKEEPER_CONNECT: zookeeper.connectionString }, '--buyers', '200', '--stock', '150');
    assertSoldExactly(sale, 'zookeeper');
    // Every buyer process closed its session: no lock node is left behind.
    const inspector = await ZooKeeperInspector.connect(zookeeper.connectionString);
    try {
      assert.deepEqual(await inspector.lockNodes('/distributed-lock'), []);
    } finally {
      inspector.close();
    }
  });
});
