import assert from 'node:assert/strict';
import { after, afterEach, before, describe, it, mock } from 'node:test';
import { Logger } from '@nestjs/common';
import type { LockService } from '../../../lib';
import { createZooKeeperBackend } from '../../../lib/backends/zookeeper/create-zookeeper-backend';
import { lockNodeName } from '../../../lib/backends/zookeeper/zookeeper-paths';
import { HolderProcess } from '../../support/holder-process';
import { lockServiceOver } from '../../support/lock-service-factory';
import { eventually, FAULT_SUITE_TIMEOUT_MS, sleep } from '../../support/timing';
import { startZooKeeperServer, type ZooKeeperServer } from '../../../servers/zookeeper-server';
import { clientOf } from './zookeeper-client-probe';
import { ZooKeeperInspector } from './zookeeper-inspect';

/** The module's ttlMs: with no sessionTimeoutMs set, the session timeout follows it. */
const TTL_MS = 1_500;
/**
 * What crash failover may take beyond ttlMs (docs/zookeeper.md): the server expires sessions on
 * tick boundaries (tickTime 100 ms here), then the watch event to the waiter, plus scheduling
 * noise on a loaded 2-core machine.
 */
const FAILOVER_BOUND_MS = 1_000;

describe('ZooKeeper: the session follows ttlMs, and a late grant is never handed out', { timeout: FAULT_SUITE_TIMEOUT_MS }, () => {
  let zookeeper: ZooKeeperServer;
  let inspector: ZooKeeperInspector;
  const services: LockService[] = [];
  const holders: HolderProcess[] = [];
  before(async () => {
    // tickTime 100: sessions may be as short as 200 ms, so ttlMs 1500 is granted as asked.
    zookeeper = await startZooKeeperServer({ config: ['forceSync=no'] });
    inspector = await ZooKeeperInspector.connect(zookeeper.connectionString);
  });
  afterEach(async () => {
    mock.restoreAll();
    await Promise.all(holders.splice(0).map((holder) => holder.stop()));
    await Promise.all(services.splice(0).map((service) => service.onApplicationShutdown()));
  });
  after(async () => {
    inspector?.close();
    await zookeeper?.stop();
  });

  /** A LockService whose backend was built as the module builds it with `ttlMs` (no sessionTimeoutMs). */
  const client = (ttlMs = TTL_MS) => {
    const backend = createZooKeeperBackend({ type: 'zookeeper', connectionString: zookeeper.connectionString }, { ttlMs, serverTimeoutMs: 5_000 });
    const service = lockServiceOver(backend, { ttlMs });
    services.push(service);
    return { service, backend };
  };
  const holderProcess = async () => {
    const holder = await HolderProcess.start('zookeeper', { connectionString: zookeeper.connectionString }, TTL_MS);
    holders.push(holder);
    return holder;
  };
  const parentOf = (name: string) => `/distributed-lock/${lockNodeName(`lock:${name}`)}`;
  const queued = (name: string, count: number) =>
    eventually(async () => (await inspector.children(parentOf(name)).catch(() => [])).length === count, 10_000, `${count} lock nodes under ${parentOf(name)}`, 10);

  it('asks the server for a session of the module ttlMs', async () => {
    const { service, backend } = client();
    await (await service.acquire('sized')).release();
    assert.equal(clientOf(backend).getSessionTimeout(), TTL_MS);
  });

  it('crash failover: a SIGKILLed holder (module ttlMs 1500, no sessionTimeoutMs) is replaced within ttlMs + the bound', async (t) => {
    const name = `crash-${Date.now()}`;
    const holder = await holderProcess();
    const holderToken = await holder.acquire(name, { waitTimeoutMs: 30_000 });
    const waiting = client().service.acquire(name, { waitTimeoutMs: 30_000 });
    await queued(name, 2);
    holder.kill('SIGKILL');
    const killedAt = performance.now();
    const lock = await waiting;
    const waitedMs = performance.now() - killedAt;
    t.diagnostic(`waiter granted ${waitedMs.toFixed(0)} ms after SIGKILL (bound: ttlMs ${TTL_MS} + ${FAILOVER_BOUND_MS} ms)`);
    assert.ok(waitedMs <= TTL_MS + FAILOVER_BOUND_MS, `granted ${waitedMs.toFixed(0)} ms after the kill`);
    assert.ok(lock.fencingToken > holderToken);
    await lock.release();
  });

  it('warns once, naming it, when the server grants a longer session than asked', async (t) => {
    const warn = mock.method(Logger.prototype, 'warn', () => undefined);
    // The test server's minSessionTimeout is 2 ticks: 200 ms.
    const { service, backend } = client(150);
    await (await service.acquire('clamped')).release();
    await (await service.acquire('clamped')).release();
    const warnings = warn.mock.calls.map((call) => String(call.arguments[0])).filter((message) => message.includes('session timeout'));
    assert.equal(warnings.length, 1, JSON.stringify(warnings));
    assert.match(warnings[0], new RegExp(`^ZooKeeper at ${backend.address.replace(/\./g, '\\.')} granted a session timeout of 200 ms, more than the 150 ms asked`));
    t.diagnostic(warnings[0]);
  });

  it('a waiter paused while queued, whose session expired meanwhile, is never handed the stale grant: it queues again and gets a fresh one', async (t) => {
    const name = `late-${Date.now()}`;
    const first = client();
    const held = await first.service.acquire(name);
    // The waiter to be paused, in its own process, directly behind the holder.
    const paused = await holderProcess();
    const pausedAcquire = paused.acquire(name, { waitTimeoutMs: 60_000 });
    await queued(name, 2);
    const next = client().service.acquire(name, { waitTimeoutMs: 60_000 });
    await queued(name, 3);
    paused.kill('SIGSTOP');
    const stoppedAt = performance.now();
    try {
      // The grant's event waits unread in the paused process's socket...
      await held.release();
      // ...until its session expires on the server, its node goes, and the next waiter holds.
      const nextLock = await next;
      const expiredAfterMs = performance.now() - stoppedAt;
      paused.kill('SIGCONT');
      // Resumed with the stale grant's event in its socket: it must not report a grant now.
      await sleep(1_000);
      assert.deepEqual(
        paused.events.filter((event) => event.type === 'acquired' || event.type === 'error'),
        [],
        'the paused waiter was handed a grant of its dead session',
      );
      assert.equal(nextLock.isHeld, true);
      await nextLock.release();
      // Queued again on a new session, behind the next holder: a fresh grant, a later token.
      const token = await pausedAcquire;
      assert.ok(token > nextLock.fencingToken, `token ${token} after ${nextLock.fencingToken}`);
      t.diagnostic(`the next waiter held ${expiredAfterMs.toFixed(0)} ms after SIGSTOP; the resumed waiter reported no grant for 1000 ms, then a fresh one (token ${token} > ${nextLock.fencingToken})`);
    } finally {
      paused.kill('SIGCONT');
    }
  });
});
