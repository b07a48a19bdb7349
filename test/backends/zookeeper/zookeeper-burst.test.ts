import assert from 'node:assert/strict';
import { after, afterEach, before, describe, it } from 'node:test';
import type { LockService } from '../../../lib';
import { batchToken } from '../../../lib/queue/batch';
import { createZooKeeperBackend } from '../../../lib/backends/zookeeper/create-zookeeper-backend';
import { PARENT_IDLE_MS } from '../../../lib/backends/zookeeper/zookeeper-parents';
import { lockNodeName, sortedLockNodes } from '../../../lib/backends/zookeeper/zookeeper-paths';
import { DEFAULT_WAIT_TIMEOUT_MS } from '../../../lib/lock-defaults';
import { startZooKeeperServer, transactionCount, type ZooKeeperServer } from '../../../servers/zookeeper-server';
import { exclusiveBurst } from '../../support/exclusive-burst';
import { lockServiceOver } from '../../support/lock-service-factory';
import { eventually, FAULT_SUITE_TIMEOUT_MS, sleep } from '../../support/timing';
import { ZooKeeperInspector } from './zookeeper-inspect';

/**
 * Contract point 5 on ZooKeeper: a burst of callers in one process is absorbed, with the module's
 * default waitTimeoutMs (10 s). A process's callers of one name share one lock node (LocalQueues).
 * Server writes are counted as ZooKeeper counts them: one zxid per transaction (a multi is one).
 */
describe('ZooKeeper backend: bursts of 1000 callers in one process', { timeout: FAULT_SUITE_TIMEOUT_MS }, () => {
  let zookeeper: ZooKeeperServer;
  let inspector: ZooKeeperInspector;
  const services: LockService[] = [];
  let seq = 0;
  const newKey = () => `zookeeper-burst-${process.pid}-${++seq}`;
  const parentOf = (key: string) => `/distributed-lock/${lockNodeName(`lock:${key}`)}`;
  const transactions = () => transactionCount(zookeeper.port);

  before(async () => {
    zookeeper = await startZooKeeperServer();
    inspector = await ZooKeeperInspector.connect(zookeeper.connectionString);
  });
  afterEach(async () => {
    await Promise.all(services.splice(0).map((service) => service.onApplicationShutdown()));
  });
  after(async () => {
    inspector?.close();
    await zookeeper?.stop();
  });

  /**
   * Clients (as processes) whose session is open already, as a running app's would be. Each
   * warm-up's parent node is removed once idle: those writes are waited for, so they are not counted.
   */
  async function clients(count: number): Promise<LockService[]> {
    const created = Array.from({ length: count }, () => lockServiceOver(createZooKeeperBackend({ type: 'zookeeper', connectionString: zookeeper.connectionString })));
    services.push(...created);
    const warmUps = created.map(() => newKey());
    for (const [i, service] of created.entries()) await (await service.acquire(warmUps[i])).release();
    const parents = warmUps.map((key) => lockNodeName(`lock:${key}`));
    const left = async () => (await inspector.children('/distributed-lock')).filter((child) => parents.includes(child));
    await eventually(async () => (await left()).length === 0, PARENT_IDLE_MS + 2_000, async () => `the warm-up parents to be removed: ${(await left()).join(', ')}`, 20);
    return created;
  }

  it('1000 callers of one key: no error within the default waitTimeoutMs, one holder at a time, one node created and deleted', async (t) => {
    const [service] = await clients(1);
    const key = newKey();
    const before = await transactions();
    const elapsedMs = await exclusiveBurst(Array.from({ length: 1000 }, () => key), [service]);
    const writes = (await transactions()) - before;
    t.diagnostic(`1000 callers of one key in one process: ${elapsedMs} ms (bound ${DEFAULT_WAIT_TIMEOUT_MS} ms), ${writes} transactions`);
    assert.ok(elapsedMs < DEFAULT_WAIT_TIMEOUT_MS, `the burst took ${elapsedMs} ms`);
    // The name's parent (new), the node with its parent's touch (one multi), the node's delete.
    assert.equal(writes, 3, 'a burst that arrives at once shares one node');
  });

  it('1000 callers of 1000 keys: no error within the default waitTimeoutMs, one parent, node and delete per key', async (t) => {
    const [service] = await clients(1);
    const before = await transactions();
    const elapsedMs = await exclusiveBurst(Array.from({ length: 1000 }, () => newKey()), [service]);
    const writes = (await transactions()) - before;
    t.diagnostic(`1000 callers of 1000 keys in one process: ${elapsedMs} ms (bound ${DEFAULT_WAIT_TIMEOUT_MS} ms), ${writes} transactions`);
    assert.ok(elapsedMs < DEFAULT_WAIT_TIMEOUT_MS, `the burst took ${elapsedMs} ms`);
    // Per key: its parent, its node (one multi), the node's delete; and the parent's removal, for
    // the keys released more than PARENT_IDLE_MS before the burst's end.
    assert.ok(writes >= 3000 && writes <= 4000, `${writes} transactions`);
  });

  it('two processes with 500 callers each on one key: one holder at a time, tokens increasing in the order the holds began, one node each', async (t) => {
    const both = await clients(2);
    const key = newKey();
    const before = await transactions();
    const elapsedMs = await exclusiveBurst(Array.from({ length: 1000 }, () => key), both);
    const writes = (await transactions()) - before;
    t.diagnostic(`2 x 500 callers of one key in two processes: ${elapsedMs} ms, ${writes} transactions`);
    // Each process: at most the parent's create (the second fails, a transaction still), one node, its delete.
    assert.ok(writes <= 6, `${writes} transactions`);
  });

  it("a batch's tokens are its node's czxid << 16 plus the turn; a process serves a later caller only after another process's earlier one", async () => {
    const [a, b] = await clients(2);
    const key = newKey();
    const tokens: Array<[string, bigint]> = [];
    const take = (service: LockService, who: string, holdMs = 0) =>
      service.withLock(key, async (lock) => {
        tokens.push([who, lock.fencingToken]);
        await sleep(holdMs);
      });
    // a's first two callers share a node, the first holding while b queues behind that node and
    // a's third caller arrives after b: it queues a node of its own, behind b's.
    const first = [take(a, 'a1', 300), take(a, 'a2')];
    await eventually(async () => (await inspector.children(parentOf(key))).length === 1, 5_000, "a's node");
    const [aNode] = await inspector.children(parentOf(key));
    const czxid = (await inspector.czxid(`${parentOf(key)}/${aNode}`))!;
    const second = take(b, 'b1');
    await eventually(async () => (await inspector.children(parentOf(key))).length === 2, 5_000, "b's node behind a's");
    const third = take(a, 'a3');
    await eventually(async () => (await inspector.children(parentOf(key))).length === 3, 5_000, "a's second node behind b's");
    const queue = sortedLockNodes(await inspector.children(parentOf(key)));
    assert.equal(queue[0], aNode);
    await Promise.all([...first, second, third]);
    assert.deepEqual(
      tokens.map(([who]) => who),
      ['a1', 'a2', 'b1', 'a3'],
    );
    assert.deepEqual(tokens.slice(0, 2).map(([, token]) => token), [batchToken(czxid, 0n), batchToken(czxid, 1n)]);
    for (let i = 1; i < tokens.length; i++) assert.ok(tokens[i][1] > tokens[i - 1][1], `tokens ${tokens.map(([w, token]) => `${w}=${token}`).join(', ')}`);
  });
});
