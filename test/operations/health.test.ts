import 'reflect-metadata';
import assert from 'node:assert/strict';
import { after, describe, it } from 'node:test';
import { Controller, Get, Module, type INestApplication } from '@nestjs/common';
import { NestFactory } from '@nestjs/core';
import { HealthCheck, HealthCheckService, TerminusModule } from '@nestjs/terminus';
import { DistributedLockHealthIndicator, DistributedLockModule, type BackendOptions } from '../../lib';
import { EtcdCluster } from '../../servers/etcd-server';
import { startRedisServer } from '../../servers/redis-server';
import { startZooKeeperServer } from '../../servers/zookeeper-server';
import { FAULT_SUITE_TIMEOUT_MS } from '../support/timing';

const SERVER_TIMEOUT_MS = 1_000;
/** The check must answer by serverTimeoutMs; this much more for the HTTP round and a loaded machine. */
const MARGIN_MS = 700;

interface LockHealth {
  status: string;
  backend: string;
  address?: string;
  roundTripMs?: number;
  message?: string;
}

/** A real server of each backend, and how to kill it. */
const SERVERS: Array<{ name: string; start(): Promise<{ backend: BackendOptions; kill(): Promise<void>; stop(): Promise<void> }> }> = [
  {
    name: 'redis',
    async start() {
      const redis = await startRedisServer();
      return { backend: { type: 'redis', url: redis.url }, kill: () => redis.server.stop('SIGKILL'), stop: () => redis.stop() };
    },
  },
  {
    name: 'etcd',
    async start() {
      const cluster = await EtcdCluster.start(1);
      return { backend: { type: 'etcd', hosts: cluster.hosts }, kill: () => cluster.kill(0), stop: () => cluster.stop() };
    },
  },
  {
    name: 'zookeeper',
    async start() {
      const zookeeper = await startZooKeeperServer();
      return { backend: { type: 'zookeeper', connectionString: zookeeper.connectionString }, kill: () => zookeeper.server.stop('SIGKILL'), stop: () => zookeeper.stop() };
    },
  },
];

async function healthApp(backend: BackendOptions): Promise<{ app: INestApplication; health(): Promise<{ status: number; lock: LockHealth; ms: number }> }> {
  @Controller()
  class HealthController {
    constructor(
      private readonly health: HealthCheckService,
      private readonly lock: DistributedLockHealthIndicator,
    ) {}

    @Get('health')
    @HealthCheck()
    check() {
      return this.health.check([() => this.lock.isHealthy('lock')]);
    }
  }
  @Module({ imports: [TerminusModule, DistributedLockModule.forRoot({ backend, serverTimeoutMs: SERVER_TIMEOUT_MS })], controllers: [HealthController] })
  class HealthAppModule {}
  const app = await NestFactory.create(HealthAppModule, { logger: false });
  await app.listen(0, '127.0.0.1');
  const url = (await app.getUrl()).replace('[::1]', '127.0.0.1');
  return {
    app,
    async health() {
      const started = performance.now();
      const response = await fetch(`${url}/health`);
      const body = (await response.json()) as { details: { lock: LockHealth } };
      return { status: response.status, lock: body.details.lock, ms: performance.now() - started };
    },
  };
}

describe('DistributedLockHealthIndicator with @nestjs/terminus, on real servers', { timeout: FAULT_SUITE_TIMEOUT_MS }, () => {
  const cleanups: Array<() => Promise<void>> = [];
  after(async () => {
    for (const cleanup of cleanups.reverse()) await cleanup().catch(() => undefined);
  });

  for (const server of SERVERS) {
    it(`${server.name}: up with its round trip, then down with the reason within serverTimeoutMs once the server is killed`, async () => {
      const running = await server.start();
      cleanups.push(running.stop);
      const { app, health } = await healthApp(running.backend);
      cleanups.push(() => app.close());
      // The first check may include the connection; the second is one round trip.
      await health();
      const up = await health();
      assert.equal(up.status, 200, JSON.stringify(up.lock));
      assert.equal(up.lock.status, 'up');
      assert.equal(up.lock.backend, server.name);
      assert.ok(typeof up.lock.roundTripMs === 'number' && up.lock.roundTripMs >= 0 && up.lock.roundTripMs < SERVER_TIMEOUT_MS, JSON.stringify(up.lock));

      await running.kill();
      const down = await health();
      console.log(`${server.name}: up in ${up.lock.roundTripMs} ms round trip; down answered in ${down.ms.toFixed(0)} ms (bound ${SERVER_TIMEOUT_MS + MARGIN_MS}): ${down.lock.message}`);
      assert.equal(down.status, 503);
      assert.equal(down.lock.status, 'down');
      assert.equal(down.lock.backend, server.name);
      assert.ok(down.lock.message && down.lock.message.length > 0);
      assert.ok(down.ms <= SERVER_TIMEOUT_MS + MARGIN_MS, `down answered after ${down.ms} ms`);
      // Again, now that the client has noticed: still bounded.
      const again = await health();
      assert.equal(again.status, 503);
      assert.ok(again.ms <= SERVER_TIMEOUT_MS + MARGIN_MS, `second down answered after ${again.ms} ms`);
    });
  }

  it('memory: up, with its ping (no lock taken), and down once the backend is closed', async () => {
    const { app, health } = await healthApp({ type: 'memory' });
    cleanups.push(() => app.close());
    const up = await health();
    assert.equal(up.status, 200);
    assert.equal(up.lock.backend, 'memory');
    const indicator = app.get(DistributedLockHealthIndicator);
    await app.close();
    const down = await indicator.isHealthy('lock');
    assert.equal(down.lock.status, 'down');
    assert.match((down.lock as { message: string }).message, /closed/);
  });
});
