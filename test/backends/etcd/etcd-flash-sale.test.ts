import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import path from 'node:path';
import { after, before, describe, it } from 'node:test';
import { promisify } from 'node:util';
import { EtcdCluster } from '../../support/etcd-server';

const run = promisify(execFile);
const driver = path.resolve(__dirname, '../../../sample-app/flash-sale.js');

/**
 * The sample app's flash sale across 4 processes, each its own Nest app, on one etcd: the stock
 * lives in etcd (EtcdStockStore) and is read, decided on and written back in separate round
 * trips under @WithLock('stock:<0>'), so only the lock keeps it from being oversold.
 */
describe('etcd flash sale across processes', () => {
  let cluster: EtcdCluster;
  before(async () => (cluster = await EtcdCluster.start(1)));
  after(() => cluster.stop());

  async function flashSale(...flags: string[]): Promise<Record<string, any>> {
    const { stdout } = await run(process.execPath, [driver, '--json', '--backend', 'etcd', '--processes', '4', ...flags], {
      timeout: 120_000,
      env: { ...process.env, ETCD_HOSTS: cluster.hosts.join(',') },
    });
    return JSON.parse(stdout.trim().split('\n').pop()!);
  }

  it('sells exactly the stock to 200 buyers in 4 processes: never oversold, winners exact', async (t) => {
    const sale = await flashSale('--buyers', '200', '--stock', '150');
    t.diagnostic(`makespan ${sale.makespanMs} ms, ${sale.criticalSectionsPerSecond} cs/s, wait p50 ${sale.waitP50Ms} ms p99 ${sale.waitP99Ms} ms`);
    assert.equal(sale.backend, 'etcd');
    assert.equal(sale.processes, 4);
    assert.equal(sale.oversold, 0);
    assert.equal(sale.winners, Math.min(sale.buyers, sale.initialStock));
    assert.equal(sale.stockLeft + sale.winners, sale.initialStock);
    assert.equal(sale.lucky, sale.winners);
    assert.deepEqual(sale.errors, {});
    assert.equal(sale.fencing.staleWriteRefused, true);
  });

  it('oversells the same sale without the lock, so the test above can fail', async () => {
    const sale = await flashSale('--buyers', '200', '--stock', '150', '--no-lock');
    assert.ok(sale.oversold > 0 || sale.lucky !== sale.winners || sale.stockLeft + sale.winners !== sale.initialStock, JSON.stringify(sale));
  });
});
