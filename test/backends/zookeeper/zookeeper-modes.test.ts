import assert from 'node:assert/strict';
import { fork, type ChildProcess } from 'node:child_process';
import { randomUUID } from 'node:crypto';
import path from 'node:path';
import { after, afterEach, before, describe, it } from 'node:test';
import { LockConfigError, LockServerUnreachableError } from '../../../lib/errors';
import type { EntryMode, LockBackend, LockGrant } from '../../../lib/backends/lock-backend.interface';
import { batchToken } from '../../../lib/queue/batch';
import { createBackend } from '../../../lib/backends/registry';
import { lockNodeName, sortedLockNodes } from '../../../lib/backends/zookeeper/zookeeper-paths';
import { startZooKeeperServer, type ZooKeeperServer } from '../../../servers/zookeeper-server';
import { abortedWithin, eventually, sleep, mostAtOnce } from '../../support/timing';
import { ClientTraffic, clientOf, watchedPaths } from './zookeeper-client-probe';
import { ZooKeeperFaultProxy } from './zookeeper-fault-proxy';
import { ZooKeeperInspector } from './zookeeper-inspect';

/** Short sessions, so that a killed holder's permit comes back in seconds; the test server allows down to 200 ms. */
const SESSION_TIMEOUT_MS = 2_000;
/**
 * What a crashed holder's permit may take beyond the session timeout (docs/zookeeper.md, the
 * same bound as a write holder's): the server expires sessions in tick steps (100 ms), then the
 * watch event, the waiter's listing, and scheduling noise on a loaded 2-core machine.
 */
const CRASH_BOUND_MS = 1_500;
const ROOT = '/distributed-lock';
/** A call must end by it when the server cannot be reached; the margin is timers and a loaded 2-core machine. */
const SERVER_TIMEOUT_MS = 1_000;
const MARGIN_MS = 500;

/** One hold of a lock, as the test saw it: from the grant to just before its release was sent. */
interface Hold {
  readonly mode: EntryMode;
  readonly client: number;
  readonly token: bigint;
  readonly start: number;
  end: number;
}

const overlap = (a: Hold, b: Hold) => a.start < b.end && b.start < a.end;


/** Tokens are distinct, and one hold that ended before another began has the lower token. */
function assertTokensInGrantOrder(holds: readonly Hold[]): void {
  assert.equal(new Set(holds.map((hold) => hold.token)).size, holds.length, 'two grants share a token');
  for (const a of holds) {
    for (const b of holds) {
      if (a.end <= b.start) assert.ok(a.token < b.token, `a ${a.mode} (token ${a.token}) ended before a ${b.mode} (token ${b.token}) began`);
    }
  }
}

/** Read-write locks and semaphores on ZooKeeper: several backends on one server, as several processes. */
describe('ZooKeeper backend: read and permit entries', () => {
  let zookeeper: ZooKeeperServer;
  let inspector: ZooKeeperInspector;
  const backends: LockBackend[] = [];
  const children: ChildProcess[] = [];
  const proxies: ZooKeeperFaultProxy[] = [];
  let seq = 0;

  before(async () => {
    zookeeper = await startZooKeeperServer();
    inspector = await ZooKeeperInspector.connect(zookeeper.connectionString);
  });
  afterEach(async () => {
    for (const child of children.splice(0)) child.kill('SIGKILL');
    await Promise.all(backends.splice(0).map((backend) => backend.close()));
    await Promise.all(proxies.splice(0).map((proxy) => proxy.stop()));
  });
  after(async () => {
    inspector?.close();
    await zookeeper?.stop();
  });

  /** `count` clients, each with its own session. */
  const clients = async (count: number): Promise<LockBackend[]> => {
    const made = await Promise.all(
      Array.from({ length: count }, () =>
        createBackend(
          { type: 'zookeeper', connectionString: zookeeper.connectionString, sessionTimeoutMs: SESSION_TIMEOUT_MS },
          { ttlMs: SESSION_TIMEOUT_MS, serverTimeoutMs: 30_000 },
        ),
      ),
    );
    backends.push(...made);
    return made;
  };
  const newKey = (what: string) => `modes:${what}-${Date.now()}-${seq++}`;
  const nodesOf = async (key: string) => inspector.children(`${ROOT}/${lockNodeName(key)}`);
  const take = (backend: LockBackend, key: string, mode: EntryMode, limit?: number, signal = new AbortController().signal): Promise<LockGrant> =>
    backend.acquire({ key, owner: randomUUID(), ttlMs: SESSION_TIMEOUT_MS, signal, mode, limit });
  const tryTake = (backend: LockBackend, key: string, mode: EntryMode, limit?: number): Promise<LockGrant | null> =>
    backend.tryAcquire({ key, owner: randomUUID(), ttlMs: SESSION_TIMEOUT_MS, mode, limit });
  /** Takes the lock, holds it `holdMs`, releases it; the hold is recorded in `holds` from its grant on. */
  const holdFor = async (backend: LockBackend, client: number, key: string, mode: EntryMode, holdMs: number, holds: Hold[], limit?: number) => {
    const grant = await take(backend, key, mode, limit);
    const hold: Hold = { mode, client, token: grant.fencingToken, start: performance.now(), end: Number.POSITIVE_INFINITY };
    holds.push(hold);
    await sleep(holdMs);
    hold.end = performance.now();
    await backend.release(grant);
  };

  it('readers of three clients hold at once; a writer overlaps nobody; tokens rise in grant order across modes', async (t) => {
    const key = newKey('rw');
    const backends = await clients(3);
    const holds: Hold[] = [];
    const first = [0, 1, 2].map((client) => holdFor(backends[client], client, key, 'read', 300, holds));
    await eventually(() => holds.length === 3, 5_000, () => `three readers, ${holds.length} granted`);
    const mixed = [
      holdFor(backends[0], 0, key, 'write', 100, holds),
      holdFor(backends[1], 1, key, 'read', 150, holds),
      holdFor(backends[2], 2, key, 'read', 150, holds),
      holdFor(backends[2], 2, key, 'write', 100, holds),
      holdFor(backends[0], 0, key, 'read', 150, holds),
      holdFor(backends[1], 1, key, 'read', 150, holds),
    ];
    await Promise.all([...first, ...mixed]);
    const readers = holds.filter((hold) => hold.mode === 'read');
    t.diagnostic(`at most ${mostAtOnce(readers)} readers at once`);
    assert.ok(mostAtOnce(readers) >= 2, 'readers of different clients never held at once');
    for (const writer of holds.filter((hold) => hold.mode === 'write')) {
      const together = holds.filter((other) => other !== writer && overlap(writer, other));
      assert.deepEqual(together, [], `a writer of client ${writer.client} held together with others`);
    }
    assertTokensInGrantOrder(holds);
    assert.deepEqual(await nodesOf(key), [], 'a node was left behind');
  });

  it('readers of one process share one node and are served together; a writer waits for the last of them; its loss tells every one', async () => {
    const [a, b] = await clients(2);
    const key = newKey('shared-read');
    const readers = await Promise.all([1, 2, 3].map(() => take(a, key, 'read')));
    assert.equal((await nodesOf(key)).length, 1, 'the readers of one process took more than one node');
    assert.equal(new Set(readers.map((reader) => reader.fencingToken)).size, 3, 'two readers share a token');
    let writerGranted = false;
    const writing = take(b, key, 'write').then((grant) => ((writerGranted = true), grant));
    await eventually(async () => (await a.inspect!(key)).waiting === 1, 5_000, 'the writer queued');
    await a.release(readers[0]);
    await a.release(readers[1]);
    await sleep(200);
    assert.equal(writerGranted, false, 'the writer was granted while a reader of the shared node still held');
    assert.equal(await a.renew(readers[2], SESSION_TIMEOUT_MS), true, "the other readers' release ended the last one");
    await a.release(readers[2]);
    const writer = await writing;
    for (const reader of readers) assert.ok(reader.fencingToken < writer.fencingToken, 'a reader token above the writer after it');
    await b.release(writer);

    const shared = await Promise.all([1, 2].map(() => take(a, key, 'read')));
    assert.equal((await nodesOf(key)).length, 1);
    assert.equal(await b.forceRelease!(key), true);
    await Promise.all(shared.map((reader) => abortedWithin(reader.lost, 1_000)));
    assert.equal(await a.renew(shared[1], SESSION_TIMEOUT_MS), false, 'a reader of a deleted node renewed');
    await Promise.all(shared.map((reader) => a.release(reader)));
    assert.deepEqual(await nodesOf(key), [], 'a node was left behind');
  });

  it('a reader that arrives behind a queued writer is granted only after that writer', async () => {
    const key = newKey('fifo');
    const [a, b, c] = await clients(3);
    const reader = await take(a, key, 'read');
    const order: string[] = [];
    const writing = take(b, key, 'write').then((grant) => (order.push('writer'), grant));
    await eventually(async () => (await a.inspect!(key)).waiting === 1, 5_000, 'the writer queued');
    const reading = take(c, key, 'read').then((grant) => (order.push('late reader'), grant));
    await eventually(async () => (await a.inspect!(key)).waiting === 2, 5_000, 'the late reader queued');
    // A reader holds, but the late one queues behind the writer: it must not join the holder.
    await sleep(300);
    assert.deepEqual(order, [], 'the late reader (or the writer) was granted while the first reader held');
    await a.release(reader);
    const writer = await writing;
    await sleep(200);
    assert.deepEqual(order, ['writer'], 'the late reader was granted while the writer held');
    await b.release(writer);
    const late = await reading;
    assert.deepEqual(order, ['writer', 'late reader']);
    assert.ok(reader.fencingToken < writer.fencingToken && writer.fencingToken < late.fencingToken, 'tokens do not rise across modes');
    await c.release(late);
  });

  it('a semaphore of 3 with 12 callers over 3 clients never has more than 3 holders, and reaches 3', async (t) => {
    const key = newKey('semaphore');
    const backends = await clients(3);
    const holds: Hold[] = [];
    let holding = 0;
    let most = 0;
    const caller = async (client: number) => {
      const grant = await take(backends[client], key, 'permit', 3);
      holding++;
      most = Math.max(most, holding);
      const hold: Hold = { mode: 'permit', client, token: grant.fencingToken, start: performance.now(), end: Number.POSITIVE_INFINITY };
      holds.push(hold);
      await sleep(60 + 20 * (holds.length % 4));
      hold.end = performance.now();
      holding--;
      await backends[client].release(grant);
    };
    await Promise.all(Array.from({ length: 12 }, (_, at) => caller(at % 3)));
    t.diagnostic(`at most ${most} holders at once`);
    assert.equal(holds.length, 12);
    assert.ok(most <= 3, `${most} permits of 3 held at once`);
    assert.equal(most, 3, 'the semaphore never reached its limit');
    assertTokensInGrantOrder(holds);
    assert.deepEqual(await nodesOf(key), [], 'a node was left behind');
  });

  it("the permits of one client each take their own: a semaphore of 4 in one process reaches 4 holders, a fifth waits", async () => {
    const key = newKey('one-process');
    const [only] = await clients(1);
    const grants = await Promise.all([1, 2, 3, 4].map(() => take(only, key, 'permit', 4)));
    assert.equal((await only.inspect!(key)).holders?.length, 4);
    assert.equal(await tryTake(only, key, 'permit', 4), null, 'a fifth permit was granted');
    const fifth = take(only, key, 'permit', 4);
    await eventually(async () => (await only.inspect!(key)).waiting === 1, 5_000, 'the fifth permit queued');
    await only.release(grants[2]);
    const granted = await fifth;
    assert.ok(granted.fencingToken > grants[3].fencingToken);
    await Promise.all([...grants.filter((_, at) => at !== 2), granted].map((grant) => only.release(grant)));
    assert.deepEqual(await nodesOf(key), []);
  });

  it('a waiting reader watches only the nearest write entry ahead, a waiting permit the limit entries ahead: a release wakes no one it cannot grant', async () => {
    const [a, b, c, d] = await clients(4);
    const key = newKey('watches');
    const parent = `${ROOT}/${lockNodeName(key)}`;
    const queue = async (length: number) => {
      await eventually(async () => (await nodesOf(key)).length === length, 5_000, `${length} nodes`);
      return sortedLockNodes(await nodesOf(key)).map((node) => `${parent}/${node}`);
    };
    const watching = (backend: LockBackend, paths: string[]) =>
      eventually(() => watchedPaths(clientOf(backend)).sort().join() === [...paths].sort().join(), 2_000, () => `watches ${paths.join(', ')}, found ${watchedPaths(clientOf(backend)).join(', ')}`);
    const writer = await take(a, key, 'write');
    const reading = take(b, key, 'read');
    await queue(2);
    const writing = take(c, key, 'write');
    await queue(3);
    const lateReading = take(d, key, 'read');
    const [first, reader, second, late] = await queue(4);
    await watching(b, [first, reader]);
    await watching(d, [second, late]);
    const lateTraffic = new ClientTraffic(clientOf(d));
    await a.release(writer);
    const granted = await reading;
    await sleep(100);
    assert.equal(lateTraffic.events, 0, `the reader behind the second writer was woken by the first's release: ${lateTraffic.describe()}`);
    await b.release(granted);
    await c.release(await writing);
    await d.release(await lateReading);

    const semaphore = newKey('permit-watches');
    const permitParent = `${ROOT}/${lockNodeName(semaphore)}`;
    const held = [await take(a, semaphore, 'permit', 2), await take(a, semaphore, 'permit', 2)];
    const nextPermit = take(b, semaphore, 'permit', 2);
    await eventually(async () => (await nodesOf(semaphore)).length === 3, 5_000, 'three permits');
    const afterNext = take(c, semaphore, 'permit', 2);
    await eventually(async () => (await nodesOf(semaphore)).length === 4, 5_000, 'four permits');
    const [p0, p1, p2, p3] = sortedLockNodes(await nodesOf(semaphore)).map((node) => `${permitParent}/${node}`);
    await watching(b, [p0, p1, p2]);
    await watching(c, [p1, p2, p3]);
    const afterTraffic = new ClientTraffic(clientOf(c));
    await a.release(held[0]);
    const next = await nextPermit;
    await sleep(100);
    assert.equal(afterTraffic.events, 0, `the permit two behind the released one was woken: ${afterTraffic.describe()}`);
    await a.release(held[1]);
    await Promise.all([b.release(next), c.release(await afterNext)]);
  });

  it('a permit holder killed with SIGKILL gives its permit back within the session timeout + bound', async (t) => {
    const key = newKey('crash');
    const [waiterClient] = await clients(1);
    const child = fork(path.join(__dirname, 'zookeeper-permit.worker.js'), [], {
      env: { ...process.env, PERMIT_CONNECTION_STRING: zookeeper.connectionString, PERMIT_SESSION_TIMEOUT_MS: String(SESSION_TIMEOUT_MS), PERMIT_KEY: key, PERMIT_LIMIT: '1' },
      stdio: ['ignore', 'inherit', 'inherit', 'ipc'],
    });
    children.push(child);
    const report = await new Promise<{ type: string; fencingToken?: string; message?: string }>((resolve, reject) => {
      child.once('message', resolve);
      child.once('exit', () => reject(new Error('the permit holder exited')));
    });
    assert.equal(report.type, 'held', report.message);
    const waiting = take(waiterClient, key, 'permit', 1);
    await eventually(async () => (await nodesOf(key)).length === 2, 5_000, 'the waiter queued');
    child.kill('SIGKILL');
    const killedAt = performance.now();
    const grant = await waiting;
    const waitedMs = performance.now() - killedAt;
    t.diagnostic(`permit back ${waitedMs.toFixed(0)} ms after SIGKILL; bound ${SESSION_TIMEOUT_MS + CRASH_BOUND_MS} ms (session timeout ${SESSION_TIMEOUT_MS} + ${CRASH_BOUND_MS})`);
    assert.ok(waitedMs >= SESSION_TIMEOUT_MS / 3, `the permit came back ${waitedMs.toFixed(0)} ms after the kill, before the session could expire`);
    assert.ok(waitedMs <= SESSION_TIMEOUT_MS + CRASH_BOUND_MS, `the permit came back ${waitedMs.toFixed(0)} ms after the kill`);
    assert.ok(grant.fencingToken > BigInt(report.fencingToken!));
    await waiterClient.release(grant);
  });

  it("a session that ends fires every read and permit grant's lost signal; the writer behind them is granted", async () => {
    const proxy = await ZooKeeperFaultProxy.start(zookeeper.port);
    proxies.push(proxy);
    const a = await createBackend(
      { type: 'zookeeper', connectionString: proxy.connectionString, sessionTimeoutMs: SESSION_TIMEOUT_MS },
      { ttlMs: SESSION_TIMEOUT_MS, serverTimeoutMs: 30_000 },
    );
    backends.push(a);
    const [b] = await clients(1);
    const key = newKey('session-end');
    const readers = [await take(a, key, 'read'), await take(a, key, 'read')];
    const semaphore = newKey('session-end-permit');
    const permit = await take(a, semaphore, 'permit', 1);
    const writing = take(b, key, 'write');
    const permitting = take(b, semaphore, 'permit', 1);
    await eventually(async () => (await b.inspect!(key)).waiting === 1 && (await b.inspect!(semaphore)).waiting === 1, 5_000, 'the writer and the permit queued');
    const session = clientOf(a);
    // Cut off first, or its reconnection could take the session back before the close is applied.
    proxy.block();
    await ZooKeeperInspector.endSession(zookeeper.connectionString, session.getSessionId(), session.getSessionPassword());
    proxy.unblock();
    await Promise.all([...readers, permit].map((grant) => abortedWithin(grant.lost, SESSION_TIMEOUT_MS + CRASH_BOUND_MS)));
    const [writer, next] = await Promise.all([writing, permitting]);
    assert.equal(await a.renew(readers[0], SESSION_TIMEOUT_MS), false);
    await Promise.all([b.release(writer), b.release(next)]);
  });

  it('black-holed: read and permit acquisitions, tries, renewals and releases end by serverTimeoutMs', async (t) => {
    const proxy = await ZooKeeperFaultProxy.start(zookeeper.port);
    proxies.push(proxy);
    // A session longer than the bound, so that the calls end on the bound, not on the session's death.
    const cut = await createBackend(
      { type: 'zookeeper', connectionString: proxy.connectionString, sessionTimeoutMs: 10_000 },
      { ttlMs: 10_000, serverTimeoutMs: SERVER_TIMEOUT_MS },
    );
    backends.push(cut);
    const key = newKey('black-holed');
    const reader = await take(cut, key, 'read');
    proxy.blackHole();
    const endsUnreachable = async (operation: string, call: () => Promise<unknown>) => {
      const started = performance.now();
      await assert.rejects(call(), (error) => error instanceof LockServerUnreachableError && new RegExp(`to ${operation}\\b`).test(error.message));
      const tookMs = performance.now() - started;
      t.diagnostic(`${operation}: ended after ${tookMs.toFixed(0)} ms (bound ${SERVER_TIMEOUT_MS} + ${MARGIN_MS} ms)`);
      assert.ok(tookMs >= SERVER_TIMEOUT_MS - 50 && tookMs <= SERVER_TIMEOUT_MS + MARGIN_MS, `${operation} ended after ${tookMs.toFixed(0)} ms`);
    };
    await endsUnreachable('acquire', () => take(cut, newKey('cut-read'), 'read'));
    await endsUnreachable('acquire', () => take(cut, newKey('cut-permit'), 'permit', 2));
    await endsUnreachable('try to acquire', () => tryTake(cut, newKey('cut-try'), 'permit', 2));
    await endsUnreachable('renew', () => cut.renew(reader, 10_000));
    await endsUnreachable('release', () => cut.release(reader));
  });

  it('tokens rise strictly per key in grant order across write, read and permit entries; a read or permit token is czxid << 16', async () => {
    const [a, b] = await clients(2);
    const key = newKey('tokens');
    let last = 0n;
    for (const [backend, mode] of [[a, 'write'], [b, 'read'], [a, 'read'], [b, 'write'], [a, 'read']] as const) {
      const grant = await take(backend, key, mode);
      assert.ok(grant.fencingToken > last, `a ${mode} token ${grant.fencingToken} after ${last}`);
      last = grant.fencingToken;
      if (mode === 'read') {
        const [node] = await nodesOf(key);
        assert.equal(grant.fencingToken, batchToken((await inspector.czxid(`${ROOT}/${lockNodeName(key)}/${node}`))!, 0n));
      }
      await backend.release(grant);
    }
    const semaphore = newKey('permit-tokens');
    const permits: bigint[] = [];
    for (const backend of [a, b, a]) {
      const grant = await take(backend, semaphore, 'permit', 2);
      permits.push(grant.fencingToken);
      await backend.release(grant);
    }
    assert.ok(permits[0] < permits[1] && permits[1] < permits[2], `permit tokens ${permits.join(', ')}`);
  });

  it('an aborted reader or permit leaves no entry behind, and the callers behind it are granted', async () => {
    const [a, b, c] = await clients(3);
    const key = newKey('abort-read');
    const writer = await take(a, key, 'write');
    const stop = new AbortController();
    const reading = take(b, key, 'read', undefined, stop.signal);
    const writerBehind = take(c, key, 'write');
    await eventually(async () => (await a.inspect!(key)).waiting === 2, 5_000, 'a reader and a writer queued');
    const reason = new Error('caller gave up');
    stop.abort(reason);
    await assert.rejects(reading, (error) => error === reason);
    await eventually(async () => (await a.inspect!(key)).waiting === 1, 2_000, async () => `the aborted reader's node gone: ${(await nodesOf(key)).join(', ')}`);
    await a.release(writer);
    const next = await writerBehind;
    assert.deepEqual((await a.inspect!(key)).waiting, 0);
    await c.release(next);

    const semaphore = newKey('abort-permit');
    const held = await take(a, semaphore, 'permit', 1);
    const permitStop = new AbortController();
    const permitting = take(b, semaphore, 'permit', 1, permitStop.signal);
    await eventually(async () => (await a.inspect!(semaphore)).waiting === 1, 5_000, 'the permit queued');
    permitStop.abort(reason);
    await assert.rejects(permitting, (error) => error === reason);
    await eventually(async () => (await a.inspect!(semaphore)).waiting === 0, 2_000, 'the aborted permit gone');
    const afterAbort = take(c, semaphore, 'permit', 1);
    await a.release(held);
    await c.release(await afterAbort);
    assert.deepEqual(await nodesOf(semaphore), []);
  });

  it('a permit whose limit differs from a queued or held permit of the key is refused, naming the key and both limits', async () => {
    const [a, b] = await clients(2);
    const key = newKey('limits');
    const held = await take(a, key, 'permit', 2);
    const check = (error: unknown) => {
      assert.ok(error instanceof LockConfigError, String(error));
      assert.equal(error.option, 'limit');
      assert.ok(error.message.includes(key), error.message);
      assert.match(error.message, /limit 2\b.*limit 3\b/);
      return true;
    };
    await assert.rejects(take(b, key, 'permit', 3), check);
    await assert.rejects(tryTake(b, key, 'permit', 3), check);
    await assert.rejects(take(a, key, 'permit', 0), LockConfigError);
    assert.equal((await a.inspect!(key)).waiting, 0, 'the refused permit left its node');
    const same = await take(b, key, 'permit', 2);
    await Promise.all([a.release(held), b.release(same)]);
  });

  it("inspect shows the holders' mode, limit and tokens; forceRelease removes every holder, who is told", async () => {
    const [a, b, c] = await clients(3);
    const key = newKey('inspect-read');
    const readers = [await take(a, key, 'read'), await take(b, key, 'read')];
    const writing = take(c, key, 'write');
    await eventually(async () => (await c.inspect!(key)).waiting === 1, 5_000, 'the writer queued');
    const view = await c.inspect!(key);
    assert.equal(view.held, true);
    assert.equal(view.mode, 'read');
    assert.equal(view.limit, undefined);
    assert.deepEqual(view.holders?.map((holder) => holder.fencingToken), readers.map((reader) => reader.fencingToken));
    assert.equal(view.holder?.fencingToken, readers[0].fencingToken);
    assert.match(view.holder!.owner, new RegExp(`^[0-9a-f]{16}/${readers[0].owner}$`));
    assert.equal(await c.forceRelease!(key), true);
    await Promise.all(readers.map((reader) => abortedWithin(reader.lost, 1_000)));
    const writer = await writing;
    assert.equal(await a.renew(readers[0], SESSION_TIMEOUT_MS), false, "a forced-out reader's renewal succeeded");
    await a.release(readers[0]);
    const afterForce = await c.inspect!(key);
    assert.equal(afterForce.mode, 'write');
    assert.deepEqual(afterForce.holders?.map((holder) => holder.fencingToken), [writer.fencingToken]);
    await c.release(writer);

    const semaphore = newKey('inspect-permit');
    const permits = [await take(a, semaphore, 'permit', 2), await take(b, semaphore, 'permit', 2)];
    const third = take(c, semaphore, 'permit', 2);
    await eventually(async () => (await a.inspect!(semaphore)).waiting === 1, 5_000, 'the third permit queued');
    const semaphoreView = await a.inspect!(semaphore);
    assert.equal(semaphoreView.mode, 'permit');
    assert.equal(semaphoreView.limit, 2);
    assert.deepEqual(semaphoreView.holders?.map((holder) => holder.fencingToken), permits.map((permit) => permit.fencingToken));
    await a.release(permits[0]);
    const granted = await third;
    await Promise.all([b.release(permits[1]), c.release(granted)]);
    assert.deepEqual(await a.inspect!(semaphore), { held: false, waiting: 0 });
  });

  it('renew and release are owner-checked; a try never queues; close aborts waits and tells holders', async () => {
    const [a, b] = await clients(2);
    const key = newKey('lease');
    const reader = await take(a, key, 'read');
    assert.equal(await a.renew(reader, SESSION_TIMEOUT_MS), true);
    assert.equal(await b.renew(reader, SESSION_TIMEOUT_MS), false, "another client renewed a reader's lease");
    await b.release(reader);
    assert.equal(await a.renew(reader, SESSION_TIMEOUT_MS), true, "another client's release ended the reader");
    const tried = await tryTake(b, key, 'read');
    assert.ok(tried, 'a second reader was refused');
    assert.equal(await tryTake(b, key, 'write'), null);
    await a.release(reader);
    await a.release(reader);
    assert.equal(await a.renew(reader, SESSION_TIMEOUT_MS), false, 'a released reader renewed');
    await b.release(tried);

    const closing = newKey('close');
    const writer = await take(b, closing, 'write');
    const held = await take(a, `${closing}-other`, 'read');
    const waiting = take(a, closing, 'read');
    await eventually(async () => (await b.inspect!(closing)).waiting === 1, 5_000, 'the reader queued');
    const refused = assert.rejects(waiting, /closed while waiting/);
    await a.close();
    await refused;
    assert.equal(held.lost.aborted, true, "close did not fire a held reader's lost signal");
    assert.equal((await b.inspect!(closing)).waiting, 0, "the closed client's waiting node is left");
    await b.release(writer);
  });
});
