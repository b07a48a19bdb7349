import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import path from 'node:path';
import { after, before, describe, it } from 'node:test';
import { promisify } from 'node:util';
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
    const sale = await runSale(zookeeper.connectionString, '--backend', 'zookeeper', '--processes', '4', '--buyers', '200', '--stock', '150');
    assert.equal(sale.backend, 'zookeeper');
    assert.equal(sale.processes, 4);
    assert.equal(sale.oversold, 0);
    assert.equal(sale.stockLeft + sale.winners, sale.initialStock);
    assert.equal(sale.lucky, sale.winners);
    assert.equal(sale.winners, Math.min(200, 150));
    assert.deepEqual(sale.errors, {});
    assert.equal(sale.fencing.staleWriteRefused, true);
    // Every buyer process closed its session: no lock node is left behind.
    const inspector = await ZooKeeperInspector.connect(zookeeper.connectionString);
    try {
      assert.deepEqual(await inspector.lockNodes('/distributed-lock'), []);
    } finally {
      inspector.close();
    }
  });
});

/** The driver as `npm start` runs it, on our server (ZOOKEEPER_CONNECT) so the test can look at the tree afterwards. */
async function runSale(connectionString: string, ...flags: string[]): Promise<Record<string, any>> {
  const driver = path.resolve(__dirname, '../../../sample-app/flash-sale.js');
  const { stdout } = await promisify(execFile)(process.execPath, [driver, '--json', ...flags], {
    timeout: 120_000,
    env: { ...process.env, ZOOKEEPER_CONNECT: connectionString },
  });
  return JSON.parse(stdout.trim().split('\n').pop()!);
}
