import assert from 'node:assert/strict';
import { createHook } from 'node:async_hooks';
import { after, afterEach, before, describe, it } from 'node:test';
import { LockTimeoutError, type LockBackend, type LockHandle, type LockLostError, type LockService } from '../../../lib';
import { batchToken } from '../../../lib/queue/batch';
import { createZooKeeperBackend } from '../../../lib/backends/zookeeper/create-zookeeper-backend';
import { PARENT_IDLE_MS } from '../../../lib/backends/zookeeper/zookeeper-parents';
import { lockNodeName, sortedLockNodes } from '../../../lib/backends/zookeeper/zookeeper-paths';
import { lockServiceOver } from '../../support/lock-service-factory';
import { abortedWithin, eventually, sleep } from '../../support/timing';
import { startZooKeeperServer, type ZooKeeperServer } from '../../../servers/zookeeper-server';
import { ClientTraffic, clientOf, watcherFunctionsOn } from './zookeeper-client-probe';
import { ZooKeeperInspector } from './zookeeper-inspect';

const ROOT = '/distributed-lock';

/** The queue itself: who is woken, what a deleted node does, what is left behind. */
describe('ZooKeeper lock queue', () => {
  let zookeeper: ZooKeeperServer;
  let inspector: ZooKeeperInspector;
  const services: LockService[] = [];

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

  /** A client of its own: its own backend, its own session. */
  const client = (): { service: LockService; backend: LockBackend } => {
    const backend = createZooKeeperBackend({ type: 'zookeeper', connectionString: zookeeper.connectionString });
    const service = lockServiceOver(backend);
    services.push(service);
    return { service, backend };
  };
  const parentOf = (name: string) => `${ROOT}/${lockNodeName(`lock:${name}`)}`;
  const queueOf = async (name: string) => sortedLockNodes(await inspector.children(parentOf(name)));
  const queued = (name: string, length: number) =>
    eventually(async () => (await queueOf(name)).length === length, 5_000, async () => `${length} lock nodes, found ${(await queueOf(name)).join(', ')}`);
  /** The lock's token is its node's czxid, read by another client, shifted as the first turn under that node. */
  const assertTokenIsCzxid = async (name: string, lock: LockHandle) => {
    const [head] = await queueOf(name);
    assert.equal(lock.fencingToken, batchToken((await inspector.czxid(`${parentOf(name)}/${head}`))!, 0n), 'the token is not (czxid of the head node) << 16');
  };

  it("a waiter whose node someone else deletes never takes the lock with it: the one behind gets the lock alone", async () => {
    const name = `vandalised-waiter-${Date.now()}`;
    const [holder, waiter, behind] = [client(), client(), client()];
    const held = await holder.service.acquire(name);
    let waiterState = 'waiting';
    const waiting = waiter.service.acquire(name, { waitTimeoutMs: 20_000 });
    waiting.then(
      () => (waiterState = 'holds'),
      () => (waiterState = 'failed'),
    );
    await queued(name, 2);
    const behindWaiting = behind.service.acquire(name, { waitTimeoutMs: 20_000 });
    await queued(name, 3);
    const [, waiterNode, behindNode] = await queueOf(name);
    await inspector.remove(`${parentOf(name)}/${waiterNode}`);
    await held.release();
    const next = await behindWaiting;
    // Both were told of the holder's deletion at the same time: give the waiter as long to (wrongly) take it.
    await sleep(200);
    assert.notEqual(waiterState, 'holds', 'the waiter whose node was deleted took the lock too');
    assert.equal(next.isHeld, true);
    assert.equal((await queueOf(name))[0], behindNode);
    await assertTokenIsCzxid(name, next);
    // The waiter queued again, behind the new holder.
    await queued(name, 2);
    await next.release();
    const last = await waiting;
    assert.ok(last.fencingToken > next.fencingToken);
    await last.release();
  });

  it("a holder whose node is deleted 5 ms after the grant is told at once", async (t) => {
    const name = `vandalised-holder-${Date.now()}`;
    const lock = await client().service.acquire(name);
    const grantedAt = performance.now();
    const [node] = await queueOf(name);
    await sleep(5);
    await inspector.remove(`${parentOf(name)}/${node}`);
    const deletedAt = performance.now();
    await abortedWithin(lock.signal, 1_000);
    const toldAfterMs = performance.now() - grantedAt;
    t.diagnostic(`told ${(performance.now() - deletedAt).toFixed(1)} ms after the deletion's reply, ${toldAfterMs.toFixed(1)} ms after the grant`);
    // Watched from the grant on: a watch set only after a delay (it was 50 ms) could not tell it
    // this soon. Typically 6-10 ms after the grant; the rest is slack for a loaded machine.
    assert.ok(toldAfterMs < 45, `told ${toldAfterMs.toFixed(1)} ms after the grant`);
    assert.match(String((lock.signal.reason as LockLostError).cause), /^DistributedLockError: Lock node \S+ was deleted by another client\.$/);
  });

  it("a holder's node deleted by someone else while callers of its batch wait: the holder is told, they queue again on a new node", async () => {
    const name = `vandalised-batch-${Date.now()}`;
    const { service } = client();
    // One turn of the event loop: both callers share one node, the second served after the first.
    const [first, second] = [service.acquire(name), service.acquire(name, { waitTimeoutMs: 20_000 })];
    const held = await first;
    const [node] = await queueOf(name);
    await inspector.remove(`${parentOf(name)}/${node}`);
    await abortedWithin(held.signal, 1_000);
    const next = await second;
    const [newNode, ...others] = await queueOf(name);
    assert.deepEqual(others, []);
    assert.notEqual(newNode, node, 'the waiting caller was served under the deleted node');
    // The first turn under its new node: turns count per node (Batch.newEntry).
    assert.equal(next.fencingToken, batchToken((await inspector.czxid(`${parentOf(name)}/${newNode}`))!, 0n));
    assert.ok(next.fencingToken > held.fencingToken);
    await held.release();
    assert.equal(next.isHeld, true, "the lost holder's release ended the next one's lock");
    await next.release();
    assert.deepEqual(await queueOf(name), []);
  });

  it('50 short waits behind a long-held lock leave one watcher function on the holder\'s node, and no warning', async () => {
    const name = `short-waits-${Date.now()}`;
    const held = await client().service.acquire(name, { ttlMs: 60_000 });
    const [holderNode] = await queueOf(name);
    const waiter = client();
    await (await waiter.service.acquire(`${name}-warm-up`)).release();
    const traffic = new ClientTraffic(clientOf(waiter.backend));
    const warnings: Error[] = [];
    const onWarning = (warning: Error) => warnings.push(warning);
    process.on('warning', onWarning);
    try {
      for (let i = 0; i < 50; i++) await assert.rejects(waiter.service.acquire(name, { waitTimeoutMs: 20 }), LockTimeoutError);
      await sleep(20); // process warnings are emitted on a later tick
    } finally {
      process.off('warning', onWarning);
    }
    assert.ok(traffic.sent('getData') >= 50, `the waits did not all watch the holder: ${traffic.describe()}`);
    assert.deepEqual(warnings.map(String), []);
    assert.equal(watcherFunctionsOn(clientOf(waiter.backend), `${parentOf(name)}/${holderNode}`), 1);
    // A node is deleted after its caller was answered: on a server slowed by its disk, the last few deletes may still be on their way.
    await eventually(async () => (await queueOf(name)).length === 1, 10_000, async () => `a waiter that gave up left its node: ${(await queueOf(name)).join(', ')}`);
    assert.deepEqual(await queueOf(name), [holderNode], 'a waiter that gave up left its node');
    await held.release();
  });

  it('an uncontended lock cycle makes no AbortController and no Node timer (the withdrawal and the parent\'s idle wait make none)', async () => {
    const { service } = client();
    const name = `lean-cycle-${Date.now()}`;
    await service.withLock(name, () => undefined); // the session, and the name's parent
    const counted = { AbortController: 0, Timeout: 0 };
    const hook = createHook({ init: (_id, type) => type === 'Timeout' && counted.Timeout++ });
    const Original = globalThis.AbortController;
    globalThis.AbortController = class extends Original {
      constructor() {
        super();
        counted.AbortController++;
      }
    };
    hook.enable();
    try {
      for (let i = 0; i < 100; i++) await service.withLock(name, () => undefined);
    } finally {
      hook.disable();
      globalThis.AbortController = Original;
    }
    // The client's own keepalive may set a timer meanwhile; one per cycle would be 100.
    assert.ok(counted.AbortController === 0 && counted.Timeout <= 2, `100 cycles made ${counted.AbortController} AbortControllers and ${counted.Timeout} Node timers`);
  });

  it('wakes only the next waiter per release (no herd); every token is its node\'s czxid << 16', async (t) => {
    const name = `no-herd-${Date.now()}`;
    const holder = client();
    let current = await holder.service.acquire(name);
    await assertTokenIsCzxid(name, current);
    const waiters = Array.from({ length: 5 }, () => client());
    const grants: Promise<LockHandle>[] = [];
    for (const [i, waiter] of waiters.entries()) {
      grants.push(waiter.service.acquire(name, { waitTimeoutMs: 20_000 }));
      await queued(name, i + 2);
    }
    // Count from when every waiter watches its node and its predecessor, not while it is still setting them.
    const queue = await queueOf(name);
    await eventually(
      () => waiters.every(({ backend }, i) => [queue[i], queue[i + 1]].every((node) => watcherFunctionsOn(clientOf(backend), `${parentOf(name)}/${node}`) === 1)),
      5_000,
      'the waiters to watch their nodes',
    );
    const traffic = waiters.map((waiter) => new ClientTraffic(clientOf(waiter.backend)));
    for (const [i, granted] of grants.entries()) {
      await current.release();
      const next = await granted;
      // Anyone else woken by this release would be listing the children about now.
      await sleep(50);
      const woken = traffic[i];
      t.diagnostic(`release ${i + 1}: next holder sent ${woken.describe()}, got ${woken.events} event(s)`);
      assert.equal(woken.events, 1, 'the next waiter was not woken by exactly one event');
      // Directly behind the holder when it listed the queue, it holds on the event alone. Further
      // back, the node it watched may have been a waiter that gave up: it lists once (as Curator).
      const expected = i === 0 ? 0 : 1;
      assert.equal(woken.requestsSent, expected, `the next waiter sent ${woken.describe()}`);
      assert.equal(woken.sent('getChildren'), expected, `the next waiter sent ${woken.describe()}`);
      for (const [j, other] of traffic.entries()) {
        if (j <= i) continue;
        assert.equal(other.events, 0, `waiter ${j + 1} was woken by release ${i + 1}`);
        assert.equal(other.requestsSent, 0, `waiter ${j + 1} sent ${other.describe()} on release ${i + 1}`);
      }
      await assertTokenIsCzxid(name, next);
      assert.ok(next.fencingToken > current.fencingToken);
      for (const counter of traffic) counter.reset();
      current = next;
    }
    await current.release();
  });

  const giveUps: [string, (service: LockService, name: string) => Promise<void>][] = [
    ['a tryAcquire that finds the lock busy', async (service, name) => assert.equal(await service.tryAcquire(name), null)],
    ['a waiter that gives up', (service, name) => assert.rejects(service.acquire(name, { waitTimeoutMs: 50 }), LockTimeoutError)],
  ];
  for (const [label, giveUp] of giveUps) {
    it(`${label}, as the last user of the name, leaves no empty parent after PARENT_IDLE_MS`, async (t) => {
      const name = `last-user-${label.split(' ').pop()}-${Date.now()}`;
      // The holder is another process's, which will not clean up after itself (SIGKILLed, say).
      const foreignHolder = await inspector.createLockNode(parentOf(name));
      await giveUp(client().service, name);
      await inspector.remove(foreignHolder);
      const emptiedAt = Date.now();
      // Removed by this client, PARENT_IDLE_MS after it gave up (a little before emptiedAt), plus a delete.
      await eventually(
        async () => !(await inspector.children(ROOT)).includes(lockNodeName(`lock:${name}`)),
        PARENT_IDLE_MS + 2_000,
        `the empty parent ${parentOf(name)} to be removed: it was left behind`,
        20,
      );
      t.diagnostic(`parent removed ${Date.now() - emptiedAt} ms after it was emptied`);
    });
  }
});
