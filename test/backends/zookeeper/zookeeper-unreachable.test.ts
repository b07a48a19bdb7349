import assert from 'node:assert/strict';
import { after, afterEach, before, describe, it, mock } from 'node:test';
import { Logger } from '@nestjs/common';
import { LockServerUnreachableError, LockTimeoutError, type LockBackend } from '../../../lib';
import { createZooKeeperBackend } from '../../../lib/backends/zookeeper/create-zookeeper-backend';
import type { ZooKeeperLockBackend } from '../../../lib/backends/zookeeper/zookeeper.backend';
import { pause } from '../../../lib/backends/zookeeper/zookeeper-wait';
import { freePort } from '../../../servers/free-port';
import { lockServiceOver } from '../../support/lock-service-factory';
import { FAULT_SUITE_TIMEOUT_MS, sleep } from '../../support/timing';
import { startZooKeeperServer, type ZooKeeperServer } from '../../../servers/zookeeper-server';
import { ZooKeeperFaultProxy } from './zookeeper-fault-proxy';

/** Short, so each case ends in seconds; a call must end by it when the server cannot be reached. */
const SERVER_TIMEOUT_MS = 1_000;
/** Timers, the deadline scheduler's granularity and a loaded 2-core machine, past the bound. */
const MARGIN_MS = 500;
const SETTINGS = { ttlMs: 10_000, serverTimeoutMs: SERVER_TIMEOUT_MS };

describe('ZooKeeper unreachable: said as unreachable, by serverTimeoutMs', { timeout: FAULT_SUITE_TIMEOUT_MS }, () => {
  let zookeeper: ZooKeeperServer;
  const backends: LockBackend[] = [];
  const proxies: ZooKeeperFaultProxy[] = [];
  before(async () => {
    zookeeper = await startZooKeeperServer({ config: ['forceSync=no'] });
  });
  afterEach(async () => {
    mock.restoreAll();
    await Promise.all(backends.splice(0).map((backend) => backend.close()));
    await Promise.all(proxies.splice(0).map((proxy) => proxy.stop()));
  });
  after(async () => {
    await zookeeper?.stop();
  });

  const backendAt = (connectionString: string) => {
    const backend = createZooKeeperBackend({ type: 'zookeeper', connectionString }, SETTINGS);
    backends.push(backend);
    return backend;
  };

  /**
   * Runs `call`; asserts it ends with LockServerUnreachableError naming `address` by the bound;
   * returns the time taken. The backend's bound and LockService's fall together: either may say it.
   */
  async function endsUnreachable(call: () => Promise<unknown>, address: string, operation: string): Promise<number> {
    const started = performance.now();
    const error = await call().then(
      () => assert.fail(`${operation} succeeded with the server unreachable`),
      (caught: unknown) => caught,
    );
    const tookMs = performance.now() - started;
    assert.ok(error instanceof LockServerUnreachableError, `${operation}: ${String(error)}`);
    assert.equal(error.address, address);
    assert.match(error.message, new RegExp(`^Could not reach the zookeeper server at ${address.replace(/\./g, '\\.')} to ${operation}\\b.* within \\d+ ms`));
    assert.ok(tookMs >= SERVER_TIMEOUT_MS - 50, `${operation} gave up after ${tookMs.toFixed(0)} ms, before serverTimeoutMs`);
    assert.ok(tookMs <= SERVER_TIMEOUT_MS + MARGIN_MS, `${operation} ended ${tookMs.toFixed(0)} ms after it began`);
    return tookMs;
  }

  /** acquire (waitTimeoutMs far above serverTimeoutMs) and tryAcquire against `backend`, each bounded by serverTimeoutMs. */
  async function bothEndUnreachable(backend: ZooKeeperLockBackend, t: { diagnostic(message: string): void }, what: string): Promise<void> {
    const service = lockServiceOver(backend);
    const acquireMs = await endsUnreachable(() => service.acquire(`${what}-a`, { waitTimeoutMs: 30_000 }), backend.address, 'acquire');
    const tryMs = await endsUnreachable(() => service.tryAcquire(`${what}-t`), backend.address, 'try to acquire');
    assert.ok(backend.unreachable() instanceof Error, 'unreachable() says nothing');
    t.diagnostic(
      `${what}: acquire ended after ${acquireMs.toFixed(0)} ms, tryAcquire after ${tryMs.toFixed(0)} ms ` +
        `(bound serverTimeoutMs ${SERVER_TIMEOUT_MS} + ${MARGIN_MS} ms); unreachable(): ${backend.unreachable()!.message}`,
    );
  }

  it('server down (nothing listens): creating the backend does not wait; calls end by serverTimeoutMs; one startup warning naming the address', async (t) => {
    const warn = mock.method(Logger.prototype, 'warn', () => undefined);
    const port = await freePort();
    // Loading the client library is not waiting for the server: done before the clock starts.
    require('node-zookeeper-client');
    const created = performance.now();
    const backend = backendAt(`127.0.0.1:${port}`);
    // Waiting for the server would take serverTimeoutMs (1000 ms) here; 100 ms leaves room for a busy machine.
    assert.ok(performance.now() - created < 100, `creating the backend took ${(performance.now() - created).toFixed(1)} ms`);
    assert.equal(backend.address, `127.0.0.1:${port}`);
    assert.ok(backend.unreachable() instanceof Error);
    await bothEndUnreachable(backend, t, 'down');
    await sleep(SERVER_TIMEOUT_MS);
    const warnings = warn.mock.calls.map((call) => String(call.arguments[0])).filter((message) => message.includes(`127.0.0.1:${port}`));
    assert.equal(warnings.length, 1, JSON.stringify(warnings));
    assert.match(warnings[0], /could not be reached within serverTimeoutMs \(1000 ms\) of startup/);
  });

  it('a server that comes up after startup: calls fail clearly until then, and work once it is up', async () => {
    mock.method(Logger.prototype, 'warn', () => undefined);
    const info = mock.method(Logger.prototype, 'log', () => undefined);
    const proxy = await ZooKeeperFaultProxy.start(zookeeper.port);
    proxies.push(proxy);
    // Refused: every connection is hung up on, as a server still starting would.
    proxy.block();
    const backend = backendAt(proxy.connectionString);
    const service = lockServiceOver(backend);
    await assert.rejects(service.tryAcquire('late-server'), LockServerUnreachableError);
    proxy.unblock();
    const lock = await service.acquire('late-server', { waitTimeoutMs: 5_000 });
    assert.equal(backend.unreachable(), undefined);
    await lock.release();
    assert.ok(
      info.mock.calls.some((call) => String(call.arguments[0]) === `ZooKeeper at ${backend.address} is reachable now.`),
      'no "reachable now" after the startup warning',
    );
  });

  it('server paused (SIGSTOP: the port accepts, the handshake is never answered): calls end by serverTimeoutMs', async (t) => {
    mock.method(Logger.prototype, 'warn', () => undefined);
    const paused = await startZooKeeperServer();
    paused.server.pause();
    try {
      await bothEndUnreachable(backendAt(paused.connectionString), t, 'paused');
    } finally {
      paused.server.resume();
      await paused.stop();
    }
  });

  it('connection black-holed after the session was up (no socket error): calls end by serverTimeoutMs; unreachable() says so', async (t) => {
    const proxy = await ZooKeeperFaultProxy.start(zookeeper.port);
    proxies.push(proxy);
    const backend = backendAt(proxy.connectionString);
    const service = lockServiceOver(backend);
    await (await service.acquire('warm-up')).release();
    assert.equal(backend.unreachable(), undefined, 'a healthy session called unreachable');
    proxy.blackHole();
    await bothEndUnreachable(backend, t, 'black-holed');
  });

  it('connection black-holed while a lock is held: its renewal and its release end by serverTimeoutMs', async (t) => {
    const proxy = await ZooKeeperFaultProxy.start(zookeeper.port);
    proxies.push(proxy);
    const backend = backendAt(proxy.connectionString);
    const held = await lockServiceOver(backend).acquire('held-when-cut');
    proxy.blackHole();
    const renewMs = await endsUnreachable(() => held.extend(), backend.address, '(renew|extend)');
    // The handle's release never fails the caller (the lease runs out on its own); the backend's does, by the bound.
    const releaseMs = await endsUnreachable(() => backend.release(held.lease.grant), backend.address, 'release');
    t.diagnostic(`black-holed holder: extend() ended after ${renewMs.toFixed(0)} ms, release after ${releaseMs.toFixed(0)} ms`);
  });

  it('a wait that ends before serverTimeoutMs on a silent server is said as unreachable, not blamed on a holder', async (t) => {
    const proxy = await ZooKeeperFaultProxy.start(zookeeper.port);
    proxies.push(proxy);
    const backend = createZooKeeperBackend({ type: 'zookeeper', connectionString: proxy.connectionString }, { ttlMs: 10_000, serverTimeoutMs: 5_000 });
    backends.push(backend);
    const service = lockServiceOver(backend);
    await (await service.acquire('warm-up')).release();
    proxy.blackHole();
    // The backend may look at the caller's signal only once its entry waits (AcquireRequest.signal):
    // LockService ends the wait at waitTimeoutMs and asks unreachable() why.
    const waitTimeoutMs = 1_500;
    const started = performance.now();
    await assert.rejects(service.acquire('silent', { waitTimeoutMs }), LockServerUnreachableError);
    const tookMs = performance.now() - started;
    assert.ok(tookMs <= waitTimeoutMs + MARGIN_MS, `the wait ended ${tookMs.toFixed(0)} ms after it began`);
    const reason = backend.unreachable();
    assert.ok(reason instanceof Error, 'unreachable() was undefined at the end of the wait');
    assert.match(reason.message, /^connected, but no reply from the server for \d+ ms$/);
    t.diagnostic(`at waitTimeoutMs ${waitTimeoutMs} (serverTimeoutMs 5000): LockServerUnreachableError after ${tookMs.toFixed(0)} ms (bound ${waitTimeoutMs + MARGIN_MS} ms); unreachable() = ${reason.message}`);
  });

  it('a busy lock on a healthy server is a timeout, not unreachable', async () => {
    const backend = backendAt(zookeeper.connectionString);
    const service = lockServiceOver(backend);
    const held = await service.acquire('busy');
    await assert.rejects(service.acquire('busy', { waitTimeoutMs: SERVER_TIMEOUT_MS * 2 }), LockTimeoutError);
    assert.equal(backend.unreachable(), undefined);
    await held.release();
  });

  it('the retry pause clears its timer when its signal aborts', async () => {
    const timers = () => process.getActiveResourcesInfo().filter((kind) => kind === 'Timeout').length;
    const before = timers();
    const controller = new AbortController();
    const waiting = pause(60_000, controller.signal);
    assert.equal(timers(), before + 1);
    controller.abort(new Error('stop'));
    await assert.rejects(waiting, /stop/);
    assert.equal(timers(), before, 'the 60 s timer is still armed');
  });
});
