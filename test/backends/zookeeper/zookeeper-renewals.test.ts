import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { LockLostError, type LockHandle, type LockService } from '../../../lib';
import { createZooKeeperBackend } from '../../../lib/backends/zookeeper/create-zookeeper-backend';
import { DEFAULT_ZOOKEEPER_ROOT_PATH } from '../../../lib/backends/zookeeper/zookeeper-options';
import { lockNodeName } from '../../../lib/backends/zookeeper/zookeeper-paths';
import { packetsReceived, startZooKeeperServer, transactionCount, type ZooKeeperServer } from '../../../servers/zookeeper-server';
import { lockServiceOver } from '../../support/lock-service-factory';
import { sleep } from '../../support/timing';
import { ZooKeeperFaultProxy } from './zookeeper-fault-proxy';
import { ZooKeeperInspector } from './zookeeper-inspect';

const HELD = 1_000;
/**
 * Leases renew on a grid of an eighth of their interval, one shared read per grid point they
 * fall on: at most 8 reads per interval, whatever the number of locks.
 */
const TTL_MS = 15_000;
/** LockLease renews at a third of the ttl. */
const INTERVAL_MS = TTL_MS / 3;
/** Long enough for a local server to apply a delete sent just before it. */
const APPLY_MS = 300;

describe('lease renewals on ZooKeeper share one read per tick and write nothing', () => {
  let zookeeper: ZooKeeperServer;
  let service: LockService;
  let inspector: ZooKeeperInspector | undefined;
  const held: LockHandle[] = [];

  before(async () => {
    zookeeper = await startZooKeeperServer();
    // The session as short as the leases: its own heartbeats count against the bound too.
    service = lockServiceOver(createZooKeeperBackend({ type: 'zookeeper', connectionString: zookeeper.connectionString, sessionTimeoutMs: TTL_MS }));
  });
  after(async () => {
    await Promise.all(held.map((handle) => handle.release()));
    await service?.onApplicationShutdown();
    inspector?.close();
    await zookeeper?.stop();
  });

  /** The node of a held lock, as the server lists it. */
  async function nodeOf(handle: LockHandle): Promise<string> {
    inspector ??= await ZooKeeperInspector.connect(zookeeper.connectionString);
    const parent = `${DEFAULT_ZOOKEEPER_ROOT_PATH}/${lockNodeName(`lock:${handle.key}`)}`;
    const [node] = await inspector.children(parent);
    return `${parent}/${node}`;
  }

  it(`${HELD} held locks renew with at most one request per 100 locks per interval, and stay held`, async (t) => {
    for (let from = 0; from < HELD; from += 250) {
      held.push(...(await Promise.all(Array.from({ length: 250 }, (_, i) => service.acquire(`renew-${from + i}`, { ttlMs: TTL_MS })))));
    }
    // ZooKeeper answers a session's requests in order: once this cycle is answered, the watches
    // the acquisitions set on their own nodes (sent after each grant) have all been received.
    await (await service.acquire('renew-settle')).release();
    const before = await packetsReceived(zookeeper.port);
    const started = performance.now();
    await sleep(2 * INTERVAL_MS);
    const intervals = (performance.now() - started) / INTERVAL_MS;
    // Every request of the session counts: renewals, heartbeats, the client's pings (and this srvr).
    const requests = (await packetsReceived(zookeeper.port)) - before;
    const perInterval = requests / intervals;
    const perHundredPerInterval = perInterval / (HELD / 100);
    t.diagnostic(
      `${requests} requests in ${intervals.toFixed(2)} renewal intervals for ${HELD} locks: ${perInterval.toFixed(1)} per interval, ` +
        `${perHundredPerInterval.toFixed(2)} per 100 locks per interval (bound 1; unbatched: 100)`,
    );
    assert.ok(requests > 0, 'no renewal at all');
    assert.ok(perHundredPerInterval <= 1, `${perHundredPerInterval.toFixed(2)} requests per 100 locks per interval`);
    assert.deepEqual(held.filter((handle) => !handle.isHeld).map((handle) => handle.key), []);
  });

  it(`renewing ${HELD} held locks writes nothing: the server's transaction count stays put`, async (t) => {
    const before = await transactionCount(zookeeper.port);
    const started = performance.now();
    await sleep(3 * INTERVAL_MS);
    const after = await transactionCount(zookeeper.port);
    const intervals = (performance.now() - started) / INTERVAL_MS;
    t.diagnostic(`transactions (zxid counter) ${before} before, ${after} after ${intervals.toFixed(2)} renewal intervals of ${HELD} held locks`);
    assert.equal(after, before);
    assert.deepEqual(held.filter((handle) => !handle.isHeld).map((handle) => handle.key), []);
  });

  it('a lock whose node is deleted loses its lease alone: the others stay held', async (t) => {
    const victim = held[HELD / 2];
    const node = await nodeOf(victim);
    // An operator's delete: the holder's watch on its own node hears of it.
    const deletedAt = performance.now();
    const lost = new Promise<void>((resolve) => victim.signal.addEventListener('abort', () => resolve(), { once: true }));
    await inspector!.remove(node);
    await lost;
    const lostAfterMs = performance.now() - deletedAt;
    t.diagnostic(`the victim's lost signal fired ${lostAfterMs.toFixed(0)} ms after its node's delete was sent (bound: one interval, ${INTERVAL_MS} ms, + 500)`);
    assert.ok(lostAfterMs <= INTERVAL_MS + 500, `${lostAfterMs} ms`);
    await sleep(INTERVAL_MS);
    assert.deepEqual(held.filter((handle) => handle !== victim && !handle.isHeld).map((handle) => handle.key), []);
  });

  it('a renewal sent after a delete the holder has not heard of yet refuses the lock: the watch event comes before the read', async () => {
    const victim = held[HELD / 4];
    const neighbour = held[HELD / 4 + 1];
    const node = await nodeOf(victim);
    const removed = inspector!.remove(node);
    // Queued behind the remove's own continuation, which sends it: the delete is on the wire.
    const extending = await new Promise<{ heldWhenSent: boolean; outcomes: Promise<PromiseSettledResult<void>[]> }>((resolve) =>
      queueMicrotask(() => {
        // Nothing is read meanwhile: the server applies the delete, its event waits unread.
        const until = performance.now() + APPLY_MS;
        while (performance.now() < until);
        const heldWhenSent = victim.isHeld;
        // One tick: both renewals share one read of the root path, which says nothing of the victim's node.
        resolve({ heldWhenSent, outcomes: Promise.allSettled([victim.extend(), neighbour.extend()]) });
      }),
    );
    const [ofVictim, ofNeighbour] = await extending.outcomes;
    await removed;
    assert.equal(extending.heldWhenSent, true, 'the holder had heard of the delete before the renewal was sent');
    assert.equal(ofVictim.status, 'rejected');
    assert.ok((ofVictim as PromiseRejectedResult).reason instanceof LockLostError, String((ofVictim as PromiseRejectedResult).reason));
    assert.equal(victim.isHeld, false);
    assert.deepEqual(ofNeighbour, { status: 'fulfilled', value: undefined });
    assert.equal(neighbour.isHeld, true);
  });
});

describe('a renewal across a reconnection on ZooKeeper', () => {
  let zookeeper: ZooKeeperServer;
  let proxy: ZooKeeperFaultProxy;
  let inspector: ZooKeeperInspector;
  let service: LockService;

  before(async () => {
    zookeeper = await startZooKeeperServer();
    proxy = await ZooKeeperFaultProxy.start(zookeeper.port);
    inspector = await ZooKeeperInspector.connect(zookeeper.connectionString);
    service = lockServiceOver(createZooKeeperBackend({ type: 'zookeeper', connectionString: proxy.connectionString, sessionTimeoutMs: 10_000 }));
  });
  after(async () => {
    await service?.onApplicationShutdown();
    inspector?.close();
    await proxy?.stop();
    await zookeeper?.stop();
  });

  it('refuses a lock whose node was deleted while disconnected: the read queued meanwhile goes out before the watches are set again', async () => {
    const lock = await service.acquire('renew-across-reconnection', { ttlMs: 10_000 });
    const parent = `${DEFAULT_ZOOKEEPER_ROOT_PATH}/${lockNodeName('lock:renew-across-reconnection')}`;
    const [node] = await inspector.children(parent);
    await proxy.refuse();
    await sleep(300);
    await inspector.remove(`${parent}/${node}`);
    // Queued while the client is disconnected: it is sent first on the new connection, before
    // SET_WATCHES makes the server tell of the delete; its answer alone proves nothing.
    const extending = lock.extend();
    // Each frame read on its own: the delete's replayed event cannot ride in the read's chunk.
    proxy.spaceReplies(20);
    await proxy.reopen();
    await assert.rejects(extending, LockLostError);
    assert.equal(lock.isHeld, false);
  });
});
