import { after, before, describe, it } from 'node:test';
import { EtcdCluster } from '../../../servers/etcd-server';
import { assertSoldExactly, assertWentWrong, runCrossProcessSale } from '../../support/cross-process-sale';

/**
 * The sample app's flash sale across 4 processes, each its own Nest app, on one etcd: the stock
 * lives in etcd (EtcdStockStore) and is read, decided on and written back in separate round
 * trips under @WithLock('stock:<0>'), so only the lock keeps it from being oversold.
 */
describe('etcd flash sale across processes', () => {
  let cluster: EtcdCluster;
  before(async () => (cluster = await EtcdCluster.start(1)));
  after(() => cluster.stop());

  const flashSale = (...flags: string[]) => runCrossProcessSale('etcd', { ETCD_HOSTS: cluster.hosts.join(',') }, ...flags);

  it('sells exactly the stock to 200 buyers in 4 processes: never oversold, winners exact', async (t) => {
    const sale = await flashSale('--buyers', '200', '--stock', '150');
    t.diagnostic(`makespan ${sale.makespanMs} ms, ${sale.criticalSectionsPerSecond} cs/s, wait p50 ${sale.waitP50Ms} ms p99 ${sale.waitP99Ms} ms`);
    assertSoldExactly(sale, 'etcd');
  });

  it('oversells the same sale without the lock, so the test above can fail', async () => {
    const sale = await flashSale('--buyers', '200', '--stock', '150', '--no-lock');
    assertWentWrong(sale);
  });
});
