import { after, before, describe } from 'node:test';
import { startZooKeeperServer, type ZooKeeperServer } from '../../../servers/zookeeper-server';
import { inspectCases } from '../inspect-cases';

/**
 * The inspector on ZooKeeper: the holder's own watch on its node tells it of a forceRelease as
 * soon as the server deletes the node, without waiting for a renewal.
 */
describe('ZooKeeper backend: inspect and forceRelease', () => {
  let zookeeper: ZooKeeperServer | undefined;
  before(async () => {
    zookeeper = await startZooKeeperServer();
  });
  after(async () => {
    await zookeeper?.stop();
  });

  inspectCases(() => ({
    backend: { type: 'zookeeper', connectionString: zookeeper!.connectionString },
    // The session id (16 hex digits) and the entry's id.
    owner: /^[0-9a-f]{16}\/\S+$/,
    // One watch event, on a loaded 2-core machine.
    lostBoundMs: 1_000,
  }));
});
