import assert from 'node:assert/strict';
import { after, afterEach, describe, it } from 'node:test';
import { Logger } from '@nestjs/common';
import { LockServerUnreachableError, type LockBackend } from '../../../lib';
import { createEtcdBackend } from '../../../lib/backends/etcd/etcd.backend';
import { EtcdCluster } from '../../../servers/etcd-server';
import { lockServiceOver } from '../../support/lock-service-factory';
import { eventually, FAULT_SUITE_TIMEOUT_MS, sleep } from '../../support/timing';
import { request, within } from './etcd-test-kit';

const SERVER_TIMEOUT_MS = 1_500;
const settings = { ttlMs: 5_000, serverTimeoutMs: SERVER_TIMEOUT_MS };
/** Slack for a loaded 2-core machine on top of a bound. */
const MARGIN_MS = 1_000;

/** Contract points 2 and 3 on etcd: an unreachable server is said to be one, naming its address. */
describe('etcd backend: an unreachable server', { timeout: FAULT_SUITE_TIMEOUT_MS }, () => {
  const backends: LockBackend[] = [];
  const clusters: EtcdCluster[] = [];
  let seq = 0;
  const newKey = () => `etcd-unreachable-${process.pid}-${++seq}`;
  const open = (cluster: EtcdCluster) => {
    const backend = createEtcdBackend({ type: 'etcd', hosts: cluster.hosts.map((host) => host.replace('http://', '')) }, settings);
    backends.push(backend);
    return backend;
  };
  afterEach(async () => {
    await Promise.all(backends.splice(0).map((backend) => backend.close()));
  });
  after(async () => {
    await Promise.all(clusters.map((cluster) => cluster.stop()));
  });

  /** A call ends by the bound with LockServerUnreachableError naming the hosts, etcd3's error kept as cause. */
  async function assertUnreachable(call: Promise<unknown>, address: string, boundMs: number, what: string) {
    const started = Date.now();
    await assert.rejects(within(call, boundMs + 5_000, what), (error: unknown) => {
      assert.ok(error instanceof LockServerUnreachableError, `${what}: expected LockServerUnreachableError, got ${String(error)}`);
      assert.equal(error.address, address);
      assert.ok(error.message.includes(address), error.message);
      assert.ok(error.cause !== undefined, 'the client error is not kept as cause');
      assert.doesNotMatch(error.message, /^Execution prevented/);
      return true;
    });
    const tookMs = Date.now() - started;
    console.log(`${what}: LockServerUnreachableError after ${tookMs} ms (bound ${boundMs} ms)`);
    assert.ok(tookMs <= boundMs, `${what} took ${tookMs} ms`);
  }

  for (const fault of ['killed', 'paused (SIGSTOP)'] as const) {
    it(`server ${fault}: calls fail with LockServerUnreachableError naming the hosts, unreachable() says why, and all is well once it is back`, async () => {
      const cluster = await EtcdCluster.start(1);
      clusters.push(cluster);
      const backend = open(cluster);
      const address = cluster.hosts[0].replace('http://', '');
      assert.equal(backend.address, address);
      const key = newKey();
      const held = (await backend.tryAcquire(request(key, 'before')))!;
      assert.ok(held);
      assert.equal(backend.unreachable!(), undefined);
      if (fault === 'killed') await cluster.kill(0);
      else cluster.pause(0);
      try {
        await assertUnreachable(backend.tryAcquire(request(newKey(), 'during')), address, SERVER_TIMEOUT_MS + MARGIN_MS, `tryAcquire, server ${fault}`);
        assert.ok(backend.unreachable!() instanceof Error, 'unreachable() says nothing while the server is down');
        await assertUnreachable(backend.renew(held), address, SERVER_TIMEOUT_MS + MARGIN_MS, `renew, server ${fault}`);
        // An acquisition ends by min(waitTimeoutMs, serverTimeoutMs), told the server is unreachable.
        const service = lockServiceOver(backend, { serverTimeoutMs: SERVER_TIMEOUT_MS });
        await assertUnreachable(service.acquire(newKey(), { waitTimeoutMs: 10_000 }), address, SERVER_TIMEOUT_MS + MARGIN_MS, `acquire, server ${fault}`);
        for (let i = 0; i < 5; i++) {
          // Again and again: no circuit breaker's wording ever replaces the server's address.
          await assertUnreachable(backend.tryAcquire(request(newKey(), `again-${i}`)), address, SERVER_TIMEOUT_MS + MARGIN_MS, `tryAcquire #${i + 2}, server ${fault}`);
        }
      } finally {
        if (fault === 'killed') await cluster.revive(0);
        else cluster.resume(0);
      }
      await cluster.waitHealthy(20_000);
      await eventually(
        async () => (await backend.tryAcquire(request(newKey(), `after-${Math.random()}`)).catch(() => null)) !== null,
        20_000,
        'a lock once the server is back',
        200,
      );
      assert.equal(backend.unreachable!(), undefined, 'unreachable() still reports a server that answers');
    });
  }

  it('startup with the server down: creation does not wait, calls fail naming the hosts, one warning, and locks work once it is up', async () => {
    const cluster = await EtcdCluster.start(1);
    clusters.push(cluster);
    await cluster.kill(0);
    const warnings: string[] = [];
    Logger.overrideLogger({ log() {}, error() {}, warn: (message: string) => void warnings.push(message), debug() {}, verbose() {} });
    try {
      const started = Date.now();
      const backend = open(cluster);
      assert.ok(Date.now() - started < 100, 'creating the backend waited for the server');
      const address = cluster.hosts[0].replace('http://', '');
      await assertUnreachable(backend.tryAcquire(request(newKey(), 'early')), address, SERVER_TIMEOUT_MS + MARGIN_MS, 'tryAcquire at startup, server down');
      await sleep(SERVER_TIMEOUT_MS + 500);
      assert.equal(warnings.length, 1, `warnings: ${JSON.stringify(warnings)}`);
      assert.match(warnings[0], new RegExp(address.replace(/\./g, '\\.')));
      await cluster.revive(0);
      await cluster.waitHealthy(20_000);
      const grant = await within(backend.tryAcquire(request(newKey(), 'late')), 10_000, 'a lock once the server is up');
      assert.ok(grant, 'no lock once the server came up');
      await sleep(500);
      assert.equal(warnings.length, 1, 'more than one startup warning');
    } finally {
      Logger.overrideLogger(['log', 'error', 'warn']);
    }
  });
});
