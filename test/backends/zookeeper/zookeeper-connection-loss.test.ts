import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import type { LockHandle } from '../../../lib';
import { batchToken } from '../../../lib/queue/batch';
import { createZooKeeperBackend } from '../../../lib/backends/zookeeper/create-zookeeper-backend';
import { lockNodeName } from '../../../lib/backends/zookeeper/zookeeper-paths';
import { lockServiceOver } from '../../support/lock-service-factory';
import { startZooKeeperServer, type ZooKeeperServer } from '../../../servers/zookeeper-server';
import { OP_MULTI, ZooKeeperFaultProxy } from './zookeeper-fault-proxy';
import { ZooKeeperInspector } from './zookeeper-inspect';

describe('ZooKeeper connection loss during the create (protected mode)', () => {
  let zookeeper: ZooKeeperServer;
  let proxy: ZooKeeperFaultProxy;
  let inspector: ZooKeeperInspector;
  before(async () => {
    zookeeper = await startZooKeeperServer();
    proxy = await ZooKeeperFaultProxy.start(zookeeper.port);
    inspector = await ZooKeeperInspector.connect(zookeeper.connectionString);
  });
  after(async () => {
    inspector?.close();
    await proxy?.stop();
    await zookeeper?.stop();
  });

  /** No leaked node: the lock's own is the only one, its czxid is the token's (first turn), and the release leaves none. */
  async function assertOnlyItsNode(lock: LockHandle, parent: string): Promise<void> {
    const children = await inspector.children(parent);
    assert.equal(children.length, 1, `leaked nodes: ${children.join(', ')}`);
    assert.equal(lock.fencingToken, batchToken((await inspector.czxid(`${parent}/${children[0]}`))!, 0n), 'the token is not (node czxid) << 16');
    await lock.release();
    assert.deepEqual(await inspector.children(parent), []);
  }

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
        proxy.dropNextReply(OP_MULTI);
        const acquiring = viaProxy.acquire(name, { waitTimeoutMs: 8_000 });
        if (holder) {
          await new Promise((resolve) => setTimeout(resolve, 500));
          assert.equal((await inspector.children(parent)).length, 2, 'one holder and one waiter expected, no leaked node');
          await holder.release();
        }
        // Without protected mode the retried create would queue behind its own lost node and time out here.
        const lock = await acquiring;
        assert.equal(proxy.cuts, cutsBefore + 1, 'the proxy did not drop the reply');
        await assertOnlyItsNode(lock, parent);
      } finally {
        await Promise.all([direct.onApplicationShutdown(), viaProxy.onApplicationShutdown()]);
      }
    });
  }

  it('looks for its node after the last create round too: ten creates lost on the way, the eleventh carried out with its reply lost', async () => {
    const name = 'lost-reply-last-round';
    const parent = `/distributed-lock/${lockNodeName(`lock:${name}`)}`;
    const viaProxy = lockServiceOver(createZooKeeperBackend({ type: 'zookeeper', connectionString: proxy.connectionString }));
    try {
      await (await viaProxy.acquire('warm-up')).release();
      const cutsBefore = proxy.cuts;
      // The backend gives up on a create after 10 rounds without a reply; the 10th reply is the one lost here.
      proxy.dropNextReply(OP_MULTI, { requestsToLose: 9 });
      // Giving up without a last search would leave the 10th create's node at the head of the
      // queue, for the whole session: the retry would queue behind it and time out.
      const lock = await viaProxy.acquire(name, { waitTimeoutMs: 8_000 });
      assert.equal(proxy.cuts, cutsBefore + 10, 'the proxy did not cut the connection 10 times');
      await assertOnlyItsNode(lock, parent);
    } finally {
      await viaProxy.onApplicationShutdown();
    }
  });
});
