import assert from 'node:assert/strict';
import { after, afterEach, before, describe, it } from 'node:test';
import { LockConfigError, type LockService } from '../../../lib';
import { lockNodeName } from '../../../lib/backends/zookeeper/zookeeper-paths';
import type { CuratorRecipe } from '../../../lib/backends/zookeeper/zookeeper-protocol';
import { startZooKeeperServer, type ZooKeeperServer } from '../../../servers/zookeeper-server';
import { moduleLikeService } from '../../support/lock-service-factory';
import { assertExclusive, sleep, type HoldInterval } from '../../support/timing';
import { CuratorPeer, curatorClasspath, type CuratorKind } from './curator-peer';

const ROOT = '/distributed-lock';
const KEY_PREFIX = 'lock:';
/** How long a waiter must stay waiting to show it is blocked (no grant arrives meanwhile). */
const BLOCKED_MS = 1_000;
/** A hand-over across the two clients: one watch event and a listing, with JVM and scheduling noise on a loaded 2-core machine. */
const HANDOVER_BOUND_MS = 2_000;
/** The session timeout CuratorLock.java asks for (the test server allows it): a killed JVM's node lives this long. */
const CURATOR_SESSION_MS = 10_000;

/** protocol 'curator' against a real Apache Curator 5.4 client (a JVM per peer), on one real ZooKeeper server. */
describe('ZooKeeper backend, protocol curator: interop with Apache Curator', { timeout: 180_000 }, () => {
  let zookeeper: ZooKeeperServer;
  const services: LockService[] = [];
  const peers: CuratorPeer[] = [];
  let seq = 0;

  before(async () => {
    // Compiled first, so a missing javac or jar fails the suite before the server starts.
    await curatorClasspath();
    zookeeper = await startZooKeeperServer();
  });
  afterEach(async () => {
    await Promise.all(peers.splice(0).map((peer) => peer.stop()));
    await Promise.all(services.splice(0).map((service) => service.onApplicationShutdown()));
  });
  after(async () => {
    await zookeeper?.stop();
  });

  const service = async (curatorRecipe: CuratorRecipe = 'InterProcessMutex'): Promise<LockService> => {
    const made = await moduleLikeService({
      backend: { type: 'zookeeper', connectionString: zookeeper.connectionString, protocol: 'curator', curatorRecipe },
      keyPrefix: KEY_PREFIX,
      ttlMs: 4_000,
    });
    services.push(made.service);
    return made.service;
  };
  const peer = async (kind: CuratorKind, name: string, loop?: { holdMs: number; rounds: number }) => {
    const made = await CuratorPeer.start(zookeeper.connectionString, kind, javaPath(name), loop);
    peers.push(made);
    return made;
  };
  /** The path a Java service gives Curator for the lock `name` (docs/zookeeper.md, "Protocol: curator"). */
  const javaPath = (name: string) => `${ROOT}/${lockNodeName(KEY_PREFIX + name)}`;
  const newName = (what: string) => `curator-${what}-${Date.now()}-${seq++}`;
  const granted = async <T>(promise: Promise<T>, withinMs: number): Promise<boolean> =>
    Promise.race([promise.then(() => true), sleep(withinMs).then(() => false)]);

  it("names a simple lock's path as the name with the key prefix", () => {
    assert.equal(javaPath('orders-42'), '/distributed-lock/lock:orders-42');
  });

  it("waits while Curator's InterProcessMutex holds, and takes the lock after its release", async () => {
    const name = newName('java-first');
    const java = await peer('mutex', name);
    java.send('acquire');
    await java.next('HOLDING', 10_000);
    const locks = await service();
    const ours = locks.acquire(name, { waitTimeoutMs: 30_000 });
    assert.equal(await granted(ours, BLOCKED_MS), false, 'granted while Curator held the lock');
    java.send('release');
    const released = CuratorPeer.timeOf(await java.next('RELEASED', 10_000));
    const handle = await ours;
    const delay = Date.now() - released;
    console.log(`  Curator released, we held ${delay} ms later (bound ${HANDOVER_BOUND_MS} ms)`);
    assert.ok(delay >= 0 && delay < HANDOVER_BOUND_MS, `hand-over took ${delay} ms`);
    await handle.release();
  });

  it("takes the lock once a Curator holder's JVM is SIGKILLed: when its session expires, not before", async () => {
    const name = newName('java-killed');
    const java = await peer('mutex', name);
    java.send('acquire');
    await java.next('HOLDING', 10_000);
    const locks = await service();
    const ours = locks.acquire(name, { waitTimeoutMs: 30_000 });
    const killedAt = performance.now();
    java.kill();
    const handle = await ours;
    const ms = performance.now() - killedAt;
    // Its last ping came at most a third of the timeout before the kill, so the session ends 2/3 to 3/3 of it later.
    const earliest = Math.round((CURATOR_SESSION_MS * 2) / 3) - 500;
    const bound = CURATOR_SESSION_MS + HANDOVER_BOUND_MS;
    console.log(`  Curator's JVM killed while holding: we held ${Math.round(ms)} ms later (its session ${CURATOR_SESSION_MS} ms; between ${earliest} and ${bound} ms)`);
    assert.ok(ms >= earliest, `granted ${Math.round(ms)} ms after the kill, before the holder's session could have ended`);
    assert.ok(ms < bound, `granted ${Math.round(ms)} ms after the kill`);
    await handle.release();
  });

  it("holds while Curator's InterProcessMutex waits, and Curator takes it after our release", async () => {
    const name = newName('node-first');
    const locks = await service();
    const handle = await locks.acquire(name);
    const java = await peer('mutex', name);
    java.send('acquire');
    await sleep(BLOCKED_MS);
    assert.equal(java.has('HOLDING'), false, 'Curator took the lock while we held it');
    const released = Date.now();
    await handle.release();
    const delay = CuratorPeer.timeOf(await java.next('HOLDING', 10_000)) - released;
    console.log(`  we released, Curator held ${delay} ms later (bound ${HANDOVER_BOUND_MS} ms)`);
    assert.ok(delay >= 0 && delay < HANDOVER_BOUND_MS, `hand-over took ${delay} ms`);
    java.send('release');
    await java.next('RELEASED', 10_000);
  });

  it("shares InterProcessReadWriteLock's read lock with Curator, while our writer waits for both readers", async () => {
    const name = newName('readers');
    const java = await peer('read', name);
    java.send('acquire');
    await java.next('HOLDING', 10_000);
    const readers = await service('InterProcessReadWriteLock');
    const writers = await service('InterProcessReadWriteLock');
    const reader = await readers.acquire(name, { mode: 'read', waitTimeoutMs: 5_000 });
    const writer = writers.acquire(name, { mode: 'write', waitTimeoutMs: 30_000 });
    assert.equal(await granted(writer, BLOCKED_MS), false, 'our writer was granted while two readers held');
    await reader.release();
    assert.equal(await granted(writer, BLOCKED_MS), false, "our writer was granted while Curator's reader held");
    java.send('release');
    const released = CuratorPeer.timeOf(await java.next('RELEASED', 10_000));
    const handle = await writer;
    console.log(`  Curator's reader released, our writer held ${Date.now() - released} ms later (bound ${HANDOVER_BOUND_MS} ms)`);
    // Curator's reader now waits for our writer.
    java.send('acquire');
    await sleep(BLOCKED_MS);
    assert.equal(java.has('HOLDING'), false, "Curator's reader was granted while our writer held");
    await handle.release();
    await java.next('HOLDING', 10_000);
    java.send('release');
  });

  it("holds InterProcessReadWriteLock's write lock against our readers, and waits for them", async () => {
    const name = newName('java-writer');
    const locks = await service('InterProcessReadWriteLock');
    const reader = await locks.acquire(name, { mode: 'read' });
    const java = await peer('write', name);
    java.send('acquire');
    await sleep(BLOCKED_MS);
    assert.equal(java.has('HOLDING'), false, "Curator's writer was granted while our reader held");
    await reader.release();
    await java.next('HOLDING', 10_000);
    const nextReader = locks.acquire(name, { mode: 'read', waitTimeoutMs: 30_000 });
    assert.equal(await granted(nextReader, BLOCKED_MS), false, "our reader was granted while Curator's writer held");
    java.send('release');
    await (await nextReader).release();
  });

  /** Our holds, then Curator's (from its HOLD lines), checked for overlap; our tokens increase in grant order. */
  const mixedLoop = async (name: string, javaKinds: CuratorKind[], ours: { service: LockService; mode: 'write' | 'read' }[], rounds: number) => {
    const intervals: (HoldInterval & { mode: 'write' | 'read' })[] = [];
    const javas = await Promise.all(javaKinds.map((kind) => peer(kind, name, { holdMs: 20, rounds })));
    await Promise.all(
      ours.map(async ({ service: locks, mode }, client) => {
        for (let round = 0; round < rounds; round++) {
          const handle = await locks.acquire(name, { mode, waitTimeoutMs: 60_000 });
          const start = BigInt(Date.now());
          await sleep(20);
          intervals.push({ start, end: BigInt(Date.now()), fencingToken: handle.fencingToken, holder: `our ${mode} ${client}`, mode });
          await handle.release();
        }
      }),
    );
    await Promise.all(
      javas.map(async (java, index) => {
        for (let round = 0; round < rounds; round++) {
          const [, start, end] = (await java.next('HOLD ', 60_000)).split(' ');
          intervals.push({ start: BigInt(start), end: BigInt(end), fencingToken: 0n, holder: `Curator ${javaKinds[index]} ${index}`, mode: javaKinds[index] === 'read' ? 'read' : 'write' });
        }
      }),
    );
    const ourTokens = intervals.filter((hold) => hold.holder.startsWith('our')).sort((a, b) => Number(a.start - b.start));
    for (let i = 1; i < ourTokens.length; i++) assert.ok(ourTokens[i].fencingToken > ourTokens[i - 1].fencingToken, 'our tokens did not increase in grant order');
    return intervals;
  };

  it('never lets a Curator mutex holder and ours overlap (2 JVMs and 2 of our clients, 10 rounds each)', async () => {
    const name = newName('mixed');
    const intervals = await mixedLoop(name, ['mutex', 'mutex'], [{ service: await service(), mode: 'write' }, { service: await service(), mode: 'write' }], 10);
    // Every side reads its start after the grant and its end before the release, in whole epoch milliseconds on one clock.
    assertExclusive(intervals, { tokens: false });
    assert.equal(intervals.length, 40);
  });

  it("never lets a writer overlap anyone on InterProcessReadWriteLock (Curator's reader and writer, our reader and writer)", async () => {
    const name = newName('mixed-rw');
    const intervals = await mixedLoop(
      name,
      ['read', 'write'],
      [
        { service: await service('InterProcessReadWriteLock'), mode: 'read' },
        { service: await service('InterProcessReadWriteLock'), mode: 'write' },
      ],
      8,
    );
    for (const write of intervals.filter((hold) => hold.mode === 'write')) {
      for (const other of intervals) {
        if (other !== write) assert.ok(other.end <= write.start || write.end <= other.start, `${write.holder} [${write.start}, ${write.end}] overlaps ${other.holder} [${other.start}, ${other.end}]`);
      }
    }
    assert.equal(intervals.length, 32);
  });

  it("refuses semaphores, and read locks under InterProcessMutex, naming the option to change, before any I/O", async () => {
    const locks = await service();
    await assert.rejects(locks.acquire(newName('read'), { mode: 'read' }), (error: unknown) => error instanceof LockConfigError && /curatorRecipe: 'InterProcessReadWriteLock'/.test(error.message));
    await assert.rejects(locks.acquireSemaphore(newName('permit'), 2), (error: unknown) => error instanceof LockConfigError && /use protocol 'native'/.test(error.message));
    const rw = await service('InterProcessReadWriteLock');
    await assert.rejects(rw.acquireSemaphore(newName('permit'), 2), (error: unknown) => error instanceof LockConfigError && /use protocol 'native'/.test(error.message));
  });
});
