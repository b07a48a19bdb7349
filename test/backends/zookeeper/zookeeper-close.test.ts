import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { createZooKeeperBackend } from '../../../lib/backends/zookeeper/create-zookeeper-backend';
import { freePort } from '../../../servers/free-port';
import { startZooKeeperServer, type ZooKeeperServer } from '../../../servers/zookeeper-server';

/**
 * A backend closed in the tick it was made (an app whose boot fails right after this module's
 * init): node-zookeeper-client makes its first socket on the next tick, and a close before then
 * used to reject with a TypeError from inside the client.
 */
describe('ZooKeeper backend closed in the tick it was created', () => {
  let zookeeper: ZooKeeperServer;
  before(async () => (zookeeper = await startZooKeeperServer()));
  after(() => zookeeper?.stop());

  it('with the server up: close resolves', async () => {
    const backend = createZooKeeperBackend({ type: 'zookeeper', connectionString: zookeeper.connectionString });
    await backend.close();
  });

  it('with nothing listening: close resolves, and a later call says the backend is closed', async () => {
    const backend = createZooKeeperBackend({ type: 'zookeeper', connectionString: `127.0.0.1:${await freePort()}` });
    await backend.close();
    await assert.rejects(backend.tryAcquire({ key: 'closed', owner: 'o', ttlMs: 1_000 }), /clos/i);
  });
});
