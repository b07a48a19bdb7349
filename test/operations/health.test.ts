import 'reflect-metadata';
import assert from 'node:assert/strict';
import { after, describe, it } from 'node:test';
import { Controller, Get, Module, type INestApplication } from '@nestjs/common';
import { NestFactory } from '@nestjs/core';
import { HealthCheck, HealthCheckService, TerminusModule } from '@nestjs/terminus';
import { DistributedLockHealthIndicator, DistributedLockModule, type BackendOptions } from '../../lib';
import { LOCK_BACKEND } from '../../lib/backends/lock-backend.token';
import type { LockBackend } from '../../lib/backends/lock-backend.interface';
import { EtcdCluster } from '../../servers/etcd-server';
import { startPostgresServer } from '../../servers/postgres-server';
import { RedisMasters } from '../../servers/redis-masters';
import { startRedisServer, startRedisTlsServer } from '../../servers/redis-server';
import { makeTestCertificates, type TestCertificates } from '../../servers/test-certificates';
import { startZooKeeperServer } from '../../servers/zookeeper-server';
import { eventually, FAULT_SUITE_TIMEOUT_MS } from '../support/timing';

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

interface RunningServer {
  backend: BackendOptions;
  kill(): Promise<void>;
  pause(): void;
  resume(): void;
  stop(): Promise<void>;
}

/** Throwaway certificates for a TLS server, removed with it. */
async function withCertificates(start: (certificates: TestCertificates) => Promise<RunningServer>): Promise<RunningServer> {
  const certificates = await makeTestCertificates();
  const running = await start(certificates).catch(async (error: unknown) => {
    await certificates.remove();
    throw error;
  });
  return { ...running, stop: () => running.stop().finally(() => certificates.remove()) };
}

/** A real server of each backend (plain, and secured as README's Operations → Security shows), and how to pause and kill it. */
const SERVERS: Array<{ name: string; backend: string; start(): Promise<RunningServer> }> = [
  {
    name: 'redis',
    backend: 'redis',
    async start() {
      const redis = await startRedisServer();
      return { backend: { type: 'redis', url: redis.url }, kill: () => redis.server.stop('SIGKILL'), pause: () => redis.server.pause(), resume: () => redis.server.resume(), stop: () => redis.stop() };
    },
  },
  {
    name: 'redis over TLS with a client certificate',
    backend: 'redis',
    start: () =>
      withCertificates(async (certificates) => {
        const redis = await startRedisTlsServer(certificates);
        const tls = { ca: certificates.ca, cert: certificates.client.cert, key: certificates.client.key };
        return { backend: { type: 'redis', url: redis.url, options: { tls } }, kill: () => redis.server.stop('SIGKILL'), pause: () => redis.server.pause(), resume: () => redis.server.resume(), stop: () => redis.stop() };
      }),
  },
  {
    name: 'etcd',
    backend: 'etcd',
    async start() {
      const cluster = await EtcdCluster.start(1);
      return { backend: { type: 'etcd', hosts: cluster.hosts }, kill: () => cluster.kill(0), pause: () => cluster.pause(0), resume: () => cluster.resume(0), stop: () => cluster.stop() };
    },
  },
  {
    name: 'etcd over https with a client certificate',
    backend: 'etcd',
    start: () =>
      withCertificates(async (certificates) => {
        const cluster = await EtcdCluster.start(1, { tls: certificates });
        return { backend: { type: 'etcd', hosts: cluster.hosts, credentials: cluster.credentials }, kill: () => cluster.kill(0), pause: () => cluster.pause(0), resume: () => cluster.resume(0), stop: () => cluster.stop() };
      }),
  },
  {
    name: 'redlock on 3 masters (2 of them paused, then killed)',
    backend: 'redlock',
    async start() {
      const redis = await RedisMasters.start(3);
      const majority = redis.masters.slice(0, 2);
      return {
        backend: { type: 'redlock', urls: redis.urls },
        kill: () => Promise.all(majority.map((master) => master.server.stop('SIGKILL'))).then(() => undefined),
        pause: () => majority.forEach((master) => master.server.pause()),
        resume: () => majority.forEach((master) => master.server.resume()),
        stop: () => redis.stop(),
      };
    },
  },
  {
    name: 'postgres',
    backend: 'postgres',
    async start() {
      const postgres = await startPostgresServer();
      return { backend: { type: 'postgres', url: postgres.url }, kill: () => postgres.server.stop('SIGKILL'), pause: () => postgres.server.pause(), resume: () => postgres.server.resume(), stop: () => postgres.stop() };
    },
  },
  {
    name: 'zookeeper',
    backend: 'zookeeper',
    async start() {
      const zookeeper = await startZooKeeperServer();
      return { backend: { type: 'zookeeper', connectionString: zookeeper.connectionString }, kill: () => zookeeper.server.stop('SIGKILL'), pause: () => zookeeper.server.pause(), resume: () => zookeeper.server.resume(), stop: () => zookeeper.stop() };
    },
  },
  {
    name: 'zookeeper with digest auth and an auth-only ACL',
    backend: 'zookeeper',
    async start() {
      const zookeeper = await startZooKeeperServer();
      const backend: BackendOptions = {
        type: 'zookeeper',
        connectionString: zookeeper.connectionString,
        auth: [{ scheme: 'digest', credentials: 'app:s3cret' }],
        acl: [{ scheme: 'auth', id: '', permissions: 'all' }],
      };
      return { backend, kill: () => zookeeper.server.stop('SIGKILL'), pause: () => zookeeper.server.pause(), resume: () => zookeeper.server.resume(), stop: () => zookeeper.stop() };
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

describe('DistributedLockHealthIndicator with @nestjs/terminus, on real servers', () => {
  const cleanups: Array<() => Promise<void>> = [];
  after(async () => {
    for (const cleanup of cleanups.reverse()) await cleanup().catch(() => undefined);
  });

  for (const server of SERVERS) {
    it(`${server.name}: up with its ping's round trip; down within serverTimeoutMs while the server is paused, up again on resume, down once it is killed`, { timeout: FAULT_SUITE_TIMEOUT_MS }, async () => {
      const running = await server.start();
      cleanups.push(running.stop);
      const { app, health } = await healthApp(running.backend);
      cleanups.push(() => app.close());
      // The check makes one round trip of the backend's own (no lock taken and released).
      assert.equal(typeof app.get<symbol, LockBackend>(LOCK_BACKEND).ping, 'function');
      // The first checks may include the connection (a cold JVM's first session on a loaded machine takes seconds); then one round trip.
      await eventually(async () => (await health()).status === 200, 15_000, `${server.name} up once connected`, 100);
      const up = await health();
      assert.equal(up.status, 200, JSON.stringify(up.lock));
      assert.equal(up.lock.status, 'up');
      assert.equal(up.lock.backend, server.backend);
      assert.ok(typeof up.lock.roundTripMs === 'number' && up.lock.roundTripMs >= 0 && up.lock.roundTripMs < SERVER_TIMEOUT_MS, JSON.stringify(up.lock));

      // SIGSTOP: connections stay open and nothing answers, the hardest case for a client.
      running.pause();
      let paused: Awaited<ReturnType<typeof health>>;
      try {
        paused = await health();
      } finally {
        running.resume();
      }
      console.log(`${server.name}: paused, down answered in ${paused.ms.toFixed(0)} ms (bound ${SERVER_TIMEOUT_MS + MARGIN_MS}): ${paused.lock.message}`);
      assert.equal(paused.status, 503);
      assert.equal(paused.lock.status, 'down');
      assert.ok(paused.ms <= SERVER_TIMEOUT_MS + MARGIN_MS, `paused: down answered after ${paused.ms} ms`);
      await eventually(async () => (await health()).status === 200, 15_000, `${server.name} up again after resume`, 100);

      await running.kill();
      const down = await health();
      console.log(`${server.name}: up in ${up.lock.roundTripMs} ms round trip; killed, down answered in ${down.ms.toFixed(0)} ms (bound ${SERVER_TIMEOUT_MS + MARGIN_MS}): ${down.lock.message}`);
      assert.equal(down.status, 503);
      assert.equal(down.lock.status, 'down');
      assert.equal(down.lock.backend, server.backend);
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
