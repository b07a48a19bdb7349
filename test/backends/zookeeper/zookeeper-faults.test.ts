import assert from 'node:assert/strict';
import { after, afterEach, before, describe, it } from 'node:test';
import { LockLostError, type LockService } from '../../../lib';
import { createZooKeeperBackend } from '../../../lib/backends/zookeeper/create-zookeeper-backend';
import { lockNodeName } from '../../../lib/backends/zookeeper/zookeeper-paths';
import { HolderProcess } from '../../support/holder-process';
import { lockServiceOver } from '../../support/lock-service-factory';
import { abortedWithin, sleep } from '../../support/timing';
import { startZooKeeperServer, type ZooKeeperServer } from '../../support/zookeeper-server';
import { ZooKeeperInspector } from './zookeeper-inspect';

/** Short sessions so that faults resolve in seconds; the test server allows down to 2 ticks (200 ms). */
const SESSION_TIMEOUT_MS = 2_000;
/**
 * What a fault may take beyond the session timeout on a loaded 2-core machine: the server
 * expires sessions in tick steps (100 ms), then the watch event, the waiter's reply, and
 * scheduling noise from the other suites running at the same time.
 */
const BOUND_MS = 1_500;
const ROOT = '/distributed-lock';

describe('ZooKeeper faults', () => {
  let zookeeper: ZooKeeperServer;
  let inspector: ZooKeeperInspector;
  const services: LockService[] = [];
  const holders: HolderProcess[] = [];

  before(async () => {
    zookeeper = await startZooKeeperServer();
    inspector = await ZooKeeperInspector.connect(zookeeper.connectionString);
  });
  afterEach(async () => {
    await Promise.all(holders.splice(0).map((holder) => holder.stop()));
    await Promise.all(services.splice(0).map((service) => service.onApplicationShutdown()));
  });
  after(async () => {
    inspector?.close();
    await zookeeper?.stop();
  });

  const client = () => {
    const service = lockServiceOver(createZooKeeperBackend({ type: 'zookeeper', connectionString: zookeeper.connectionString, sessionTimeoutMs: SESSION_TIMEOUT_MS }));
    services.push(service);
    return service;
  };
  const parentOf = (name: string) => `${ROOT}/${lockNodeName(`lock:${name}`)}`;

  it('a holder killed with SIGKILL frees the lock for a waiter within the session timeout + bound', async (t) => {
    const name = `sigkill-${Date.now()}`;
    const holder = await HolderProcess.start('zookeeper', { connectionString: zookeeper.connectionString, sessionTimeoutMs: String(SESSION_TIMEOUT_MS) }, 60_000);
    holders.push(holder);
    const holderToken = await holder.acquire(name);
    const waiting = client().acquire(name, { waitTimeoutMs: 30_000 });
    await sleep(200);
    assert.equal((await inspector.children(parentOf(name))).length, 2, 'the waiter did not queue behind the holder');
    holder.kill('SIGKILL');
    const killedAt = Date.now();
    const lock = await waiting;
    const waitedMs = Date.now() - killedAt;
    // The server keeps a dead client's session (and node) until the session times out: not at once...
    assert.ok(waitedMs >= SESSION_TIMEOUT_MS / 3, `the lock was free ${waitedMs} ms after the kill, before the session could expire`);
    // ...but no later than its timeout and the bound.
    assert.ok(waitedMs <= SESSION_TIMEOUT_MS + BOUND_MS, `the waiter got the lock ${waitedMs} ms after the kill`);
    t.diagnostic(`waiter got the lock ${waitedMs} ms after SIGKILL (session timeout ${SESSION_TIMEOUT_MS} ms)`);
    assert.ok(lock.fencingToken > holderToken, `token ${lock.fencingToken} after ${holderToken}`);
    await lock.release();
    assert.deepEqual(await inspector.children(parentOf(name)), [], 'a lock node was left behind');
  });

  it('ZooKeeper stopped and restarted: the holder is told within the session timeout, a waiter then acquires, no orphan node', async (t) => {
    const name = `restart-${Date.now()}`;
    const [a, b] = [client(), client()];
    const held = await a.acquire(name, { ttlMs: 120_000 });
    const waiting = b.acquire(name, { waitTimeoutMs: 120_000 });
    await sleep(200);
    const stoppedAt = Date.now();
    await zookeeper.server.stop();
    await abortedWithin(held.signal, SESSION_TIMEOUT_MS + BOUND_MS);
    const lostAfterMs = Date.now() - stoppedAt;
    assert.ok(held.signal.reason instanceof LockLostError);
    assert.equal(held.signal.reason.reason, 'backend-reported');
    assert.match(String(held.signal.reason.cause), /may have expired|expired/);
    assert.ok(lostAfterMs <= SESSION_TIMEOUT_MS + BOUND_MS, `lost signal ${lostAfterMs} ms after the stop`);
    // Down for longer than a session timeout. The server keeps sessions in its data and gives
    // them one more timeout after a restart: the old session (never resumed) must expire then.
    await sleep(SESSION_TIMEOUT_MS / 2);
    await zookeeper.server.restart();
    const restartedAt = Date.now();
    const next = await waiting;
    const waitedMs = Date.now() - restartedAt;
    assert.ok(waitedMs <= SESSION_TIMEOUT_MS + BOUND_MS, `the waiter got the lock ${waitedMs} ms after the restart`);
    t.diagnostic(`lost signal ${lostAfterMs} ms after the stop; waiter got the lock ${waitedMs} ms after the restart`);
    assert.ok(next.fencingToken > held.fencingToken);
    // The old holder never takes its node back: its handle stays lost, its release is a no-op.
    assert.equal(held.isHeld, false);
    await held.release();
    assert.equal(next.isHeld, true);
    await next.release();
    // A later acquisition of the old holder's client runs on a new session.
    const again = await a.acquire(name, { waitTimeoutMs: 10_000 });
    assert.ok(again.fencingToken > next.fencingToken);
    await again.release();
    assert.deepEqual(await inspector.lockNodes(ROOT), [], 'orphan lock nodes are left');
  });

  it('a server that stops answering (SIGSTOP) is noticed without any socket error: every lock of the session is told at once, within the session timeout', async (t) => {
    const name = `paused-${Date.now()}`;
    const [a, b] = [client(), client()];
    const held = await a.acquire(name, { ttlMs: 120_000 });
    const others = await Promise.all([1, 2].map((i) => a.acquire(`${name}-other-${i}`, { ttlMs: 120_000 })));
    const waiting = b.acquire(name, { waitTimeoutMs: 120_000 });
    await sleep(200);
    const lostAt: number[] = [];
    for (const lock of [held, ...others]) lock.signal.addEventListener('abort', () => lostAt.push(performance.now()));
    const pausedAt = Date.now();
    zookeeper.server.pause();
    try {
      await Promise.all([held, ...others].map((lock) => abortedWithin(lock.signal, SESSION_TIMEOUT_MS + BOUND_MS)));
      const lostAfterMs = Date.now() - pausedAt;
      t.diagnostic(`lost signals ${lostAfterMs} ms after SIGSTOP, ${(Math.max(...lostAt) - Math.min(...lostAt)).toFixed(1)} ms apart`);
      assert.ok(lostAfterMs <= SESSION_TIMEOUT_MS + BOUND_MS, `lost signal ${lostAfterMs} ms after SIGSTOP`);
      // One session, one verdict: all its locks are told in the same turn of the event loop.
      assert.ok(Math.max(...lostAt) - Math.min(...lostAt) < 5, `signals ${lostAt.join(', ')}`);
    } finally {
      zookeeper.server.resume();
    }
    // Resumed, the server finds the silent sessions overdue and expires them: the waiter (on a new session) gets the lock.
    const next = await waiting;
    assert.ok(next.fencingToken > held.fencingToken);
    await next.release();
    assert.deepEqual(await inspector.lockNodes(ROOT), []);
  });

  it('a lock node deleted by someone else fires the holder\'s signal at once', async () => {
    const name = `vandal-${Date.now()}`;
    const held = await client().acquire(name);
    const [node] = await inspector.children(parentOf(name));
    const deletedAt = Date.now();
    await inspector.remove(`${parentOf(name)}/${node}`);
    await abortedWithin(held.signal, 2_000);
    assert.ok(Date.now() - deletedAt < 1_000, 'the deletion was noticed late');
    assert.match(String((held.signal.reason as LockLostError).cause), /deleted by another client/);
  });
});
