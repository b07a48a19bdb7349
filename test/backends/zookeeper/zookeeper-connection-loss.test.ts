import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { createZooKeeperBackend } from '../../../lib/backends/zookeeper/create-zookeeper-backend';
import { lockNodeName } from '../../../lib/backends/zookeeper/zookeeper-paths';
import { lockServiceOver } from '../../support/lock-service-factory';
import { startZooKeeperServer, type ZooKeeperServer } from '../../support/zookeeper-server';
import { OP_MULTI, ReplyDroppingProxy } from './reply-dropping-proxy';
import { ZooKeeperInspector } from './zookeeper-inspect';

describe('ZooKeeper connection loss during the create (protected mode)', () => {
  let zookeeper: ZooKeeperServer;
  let proxy: ReplyDroppingProxy;
  let inspector: ZooKeeperInspector;
  before(async () => {
    zookeeper = await startZooKeeperServer();
    proxy = await ReplyDroppingProxy.start(zookeeper.port);
    inspector = await ZooKeeperInspector.connect(zookeeper.connectionString);
  });
  after(async () => {
    inspector?.close();
    await proxy?.stop();
    await zookeeper?.stop();
  });

  for (const contended of [false, true]) {
    it(`finds its own node after the create's reply is lost, instead of leaking one (${contended ? 'behind a holder' : 'free lock'})`, async () => {
      const name = `lost-reply-${contended}`;
      const parent = `/distributed-lock/${lockNodeName(`lock:${name}`)}`;
      const direct = lockServiceOver(createZooKeeperBackend({ type: 'zookeeper', connectionString: zookeeper.connectionString }));
      const viaProxy = lockServiceOver(createZooKeeperBackend({ type: 'zookeeper', connectionString: proxy.connectionString }));
      try {
        // Open the proxied session first, so the next multi is the lock node's create.
        await (await viaProxy.acquire('warm-up')).release();
        const holder = contended ? await direct.acquire(name) : undefined;
        const cutsBefore = proxy.cuts;
        proxy.arm(OP_MULTI);
        const acquiring = viaProxy.acquire(name, { waitTimeoutMs: 8_000 });
        if (holder) {
          await new Promise((resolve) => setTimeout(resolve, 500));
          assert.equal((await inspector.children(parent)).length, 2, 'one holder and one waiter expected, no leaked node');
          await holder.release();
        }
        // Without protected mode the retried create would queue behind its own lost node and time out here.
        const lock = await acquiring;
        assert.equal(proxy.cuts, cutsBefore + 1, 'the proxy did not drop the reply');
        const children = await inspector.children(parent);
        assert.equal(children.length, 1, `leaked nodes: ${children.join(', ')}`);
        assert.equal(lock.fencingToken, await inspector.czxid(`${parent}/${children[0]}`), 'the token is not the node czxid');
        await lock.release();
        assert.deepEqual(await inspector.children(parent), []);
      } finally {
        await Promise.all([direct.onApplicationShutdown(), viaProxy.onApplicationShutdown()]);
      }
    });
  }
});
