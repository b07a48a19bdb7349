import assert from 'node:assert/strict';
import { after, afterEach, before, describe, it } from 'node:test';
import { ConsoleLogger, Logger, Module } from '@nestjs/common';
import { NestFactory } from '@nestjs/core';
import { Redis } from 'ioredis';
import { DistributedLockModule, LockDoctorError, LockService, type DistributedLockModuleOptions } from '../../lib';
import { startRedisServer, type RedisServer } from '../../servers/redis-server';
import { CapturingLogger } from '../support/capturing-logger';

/** Boots an application with the module, the log captured; `close` stops it and restores Nest's logger. */
async function boot(options: DistributedLockModuleOptions, logger: CapturingLogger) {
  @Module({ imports: [DistributedLockModule.forRoot(options)] })
  class App {}
  return NestFactory.createApplicationContext(App, { logger, abortOnError: false });
}

const doctorLines = (logger: CapturingLogger) => logger.entries.filter((entry) => entry.context === 'DistributedLock' && entry.message.startsWith('Lock doctor:'));

describe("module option doctor: 'warn' (the default), 'fail', 'off'", () => {
  let misconfigured: RedisServer;
  let durable: RedisServer;

  before(async () => {
    [misconfigured, durable] = await Promise.all([
      startRedisServer(['--maxmemory-policy', 'volatile-lru', '--maxmemory', '64mb']),
      startRedisServer(['--appendonly', 'yes', '--appendfsync', 'always']),
    ]);
  });
  afterEach(() => Logger.overrideLogger(new ConsoleLogger()));
  after(async () => {
    await Promise.all([misconfigured?.stop(), durable?.stop()]);
  });

  it("default 'warn': the checks run in the background, locks work meanwhile; one warning per finding, each with its fix", async (t) => {
    const logger = new CapturingLogger();
    const app = await boot({ backend: { type: 'redis', url: misconfigured.url } }, logger);
    // Locks work while the doctor runs: it is not on the request path.
    await app.get(LockService).withLock('doctor:warn', () => undefined);
    // Shutdown waits for the background checks, so every line is in by now.
    await app.close();
    const lines = doctorLines(logger);
    t.diagnostic(JSON.stringify(lines.map((line) => line.message), null, 2));
    assert.deepEqual(
      lines.map((line) => [line.level, /^Lock doctor: \[(\w+)\] ([\w-]+) on /.exec(line.message)?.slice(1).join(' ')]),
      [
        ['warn', 'error maxmemory-policy'],
        ['warn', 'error appendonly'],
      ],
    );
    assert.match(lines[0].message, /maxmemory-policy is volatile-lru .* Fix: maxmemory-policy noeviction/);
  });

  it("'fail': the boot fails with LockDoctorError listing each finding, and leaves no connection open", async () => {
    const logger = new CapturingLogger();
    const failed = await boot({ backend: { type: 'redis', url: misconfigured.url }, doctor: 'fail' }, logger).then(
      async (app) => {
        await app.close();
        return undefined;
      },
      (error: unknown) => error,
    );
    assert.ok(failed instanceof LockDoctorError, `expected LockDoctorError, got ${String(failed)}`);
    assert.equal(failed.backend, 'redis');
    assert.equal(failed.findings.length, 2);
    assert.match(failed.message, /^The lock doctor refused the redis backend's servers \(doctor: 'fail'\):\n- \[error\] maxmemory-policy on 127\.0\.0\.1:\d+/);
    assert.match(failed.message, /\n- \[error\] appendonly on /);
    assert.match(failed.message, /set the module option doctor: 'warn' to boot anyway/);
    // Refused before the backend was built: the doctor's own connection is the only one there was.
    const probe = new Redis(misconfigured.url);
    try {
      let clients = '';
      for (let i = 0; i < 20 && clients !== '1'; i++, await new Promise((resolve) => setTimeout(resolve, 50))) {
        clients = /connected_clients:(\d+)/.exec(await probe.info('clients'))![1];
      }
      assert.equal(clients, '1', 'only this probe is connected');
    } finally {
      probe.disconnect();
    }
  });

  it("'fail' over a correctly configured server: the application boots", async () => {
    const logger = new CapturingLogger();
    const app = await boot({ backend: { type: 'redis', url: durable.url }, doctor: 'fail' }, logger);
    await app.close();
    assert.deepEqual(doctorLines(logger), []);
  });

  it("'off': no checks, not a line", async () => {
    const logger = new CapturingLogger();
    const app = await boot({ backend: { type: 'redis', url: misconfigured.url }, doctor: 'off' }, logger);
    await app.close();
    assert.deepEqual(doctorLines(logger), []);
  });

  it('a value that is not a mode: LockConfigError naming the option', async () => {
    const failed = await boot({ doctor: 'loud' as never }, new CapturingLogger()).then(
      (app) => app.close(),
      (error: unknown) => error,
    );
    assert.match(String(failed), /Invalid distributed lock option "doctor": must be 'warn' \(the default\), 'fail' or 'off', got "loud"\./);
  });
});
