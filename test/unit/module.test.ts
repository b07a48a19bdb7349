import 'reflect-metadata';
import assert from 'node:assert/strict';
import path from 'node:path';
import { describe, it } from 'node:test';
import { ConsoleLogger, Injectable, Logger, Module } from '@nestjs/common';
import { NestFactory } from '@nestjs/core';
import {
  currentLock,
  DistributedLockError,
  DistributedLockModule,
  LockConfigError,
  LockService,
  WithLock,
  type AcquireRequest,
  type DistributedLockModuleOptions,
} from '../../lib';
import { CapturingLogger } from '../support/capturing-logger';
import { overriddenBackend } from '../support/overridden-backend';
import { loadPeer } from '../../lib/backends/load-peer';

async function boot(lockModule: ReturnType<typeof DistributedLockModule.forRoot>) {
  @Module({ imports: [lockModule] })
  class AppModule {}
  return NestFactory.createApplicationContext(AppModule, { logger: false, abortOnError: false });
}

describe('DistributedLockModule', () => {
  it('forRoot() with no options runs on the embedded memory backend, globally', async () => {
    const app = await boot(DistributedLockModule.forRoot());
    try {
      const locks = app.get(LockService);
      const lock = await locks.acquire('a');
      // The store's first entry, turn 0 under it: (1 << 16) + 0, as every queueing backend's tokens.
      assert.equal(lock.fencingToken, 1n << 16n);
      assert.equal(await locks.tryAcquire('a'), null);
      await lock.release();
    } finally {
      await app.close();
    }
  });

  it('logs one line at boot naming the backend: the embedded one says its locks stay in the process', async () => {
    const logger = new CapturingLogger();
    @Module({ imports: [DistributedLockModule.forRoot()] })
    class LoggedApp {}
    const app = await NestFactory.createApplicationContext(LoggedApp, { logger, abortOnError: false });
    try {
      const lines = logger.entries.filter((entry) => entry.context === 'DistributedLock' && entry.message.startsWith('Locks on the'));
      assert.deepEqual(
        lines.map((entry) => [entry.level, entry.message]),
        [['log', "Locks on the embedded memory backend: they exclude callers in this process only; set the module's backend option to share them between processes."]],
      );
    } finally {
      await app.close();
      Logger.overrideLogger(new ConsoleLogger());
    }
  });

  it('forRootAsync takes imports, inject and useFactory, and uses the options the factory returns', async () => {
    const SETTINGS = Symbol('SETTINGS');
    @Module({ providers: [{ provide: SETTINGS, useValue: { prefix: 'svc-a:' } }], exports: [SETTINGS] })
    class SettingsModule {}
    const requests: AcquireRequest[] = [];
    const backend = overriddenBackend((inner) => ({
      acquire: (request) => (requests.push(request), inner.acquire(request)),
    }));
    const app = await boot(
      DistributedLockModule.forRootAsync({
        imports: [SettingsModule],
        inject: [SETTINGS],
        useFactory: (settings: { prefix: string }): DistributedLockModuleOptions => ({
          keyPrefix: settings.prefix,
          ttlMs: 5_000,
          backend: { type: 'custom', backend },
        }),
      }),
    );
    try {
      await app.get(LockService).withLock('b', (lock) => assert.equal(lock.key, 'b'));
      assert.deepEqual(
        requests.map(({ key, ttlMs }) => ({ key, ttlMs })),
        [{ key: 'svc-a:b', ttlMs: 5_000 }],
      );
    } finally {
      await app.close();
    }
  });

  it('is global unless isGlobal is false: a feature module gets LockService without importing the module', async () => {
    @Injectable()
    class Feature {
      constructor(readonly locks: LockService) {}
    }
    @Module({ providers: [Feature], exports: [Feature] })
    class FeatureModule {}
    @Module({ imports: [DistributedLockModule.forRoot(), FeatureModule] })
    class GlobalApp {}
    const app = await NestFactory.createApplicationContext(GlobalApp, { logger: false, abortOnError: false });
    try {
      await app.get(Feature).locks.withLock('feature', () => undefined);
    } finally {
      await app.close();
    }
    @Module({ imports: [DistributedLockModule.forRoot({ isGlobal: false }), FeatureModule] })
    class LocalApp {}
    await assert.rejects(NestFactory.createApplicationContext(LocalApp, { logger: false, abortOnError: false }), /LockService/);
  });

  it('@WithLock keeps working in an application after a newer one in the same process closed', async () => {
    @Injectable()
    class Jobs {
      @WithLock('job:<0>')
      async run(_id: string) {
        return currentLock()?.fencingToken;
      }
    }
    @Module({ imports: [DistributedLockModule.forRoot()], providers: [Jobs] })
    class JobsApp {}
    const first = await NestFactory.createApplicationContext(JobsApp, { logger: false, abortOnError: false });
    const second = await boot(DistributedLockModule.forRoot());
    await second.close();
    try {
      assert.equal(typeof (await first.get(Jobs).run('1')), 'bigint');
    } finally {
      await first.close();
    }
  });

  it('rejects bad @WithLock options when the class is defined', () => {
    assert.throws(() => {
      class Broken {
        @WithLock('x', { ttlMs: -1 })
        async run() {}
      }
      return Broken;
    }, (error: unknown) => error instanceof LockConfigError && error.option === 'ttlMs');
  });

  it('rejects bad options at startup with LockConfigError naming the option', async () => {
    const cases: [DistributedLockModuleOptions, string][] = [
      [{ ttlMs: 0 }, 'ttlMs'],
      [{ ttlMs: -5 }, 'ttlMs'],
      [{ ttlMs: Number.NaN }, 'ttlMs'],
      [{ ttlMs: Infinity }, 'ttlMs'],
      [{ ttlMs: 2 ** 31 }, 'ttlMs'], // Node would clamp the timer to 1 ms
      [{ waitTimeoutMs: 3e9 }, 'waitTimeoutMs'],
      [{ ttlMs: 1_000, renewIntervalMs: 1_000 }, 'renewIntervalMs'],
      [{ renewIntervalMs: 0 }, 'renewIntervalMs'],
      [{ waitTimeoutMs: -1 }, 'waitTimeoutMs'],
      [{ waitTimeoutMs: Number.NaN }, 'waitTimeoutMs'],
      [{ onLockLost: 'explode' as never }, 'onLockLost'],
      [{ renew: 'yes' as never }, 'renew'],
      [{ keyPrefix: 'x'.repeat(200) }, 'keyPrefix'],
      [{ backend: { type: 'mongodb' } as never }, 'backend.type'],
    ];
    for (const [options, option] of cases) {
      await assert.rejects(
        boot(DistributedLockModule.forRoot(options)),
        (error: unknown) => error instanceof LockConfigError && error.option === option && error.message.includes(option),
        `accepted ${JSON.stringify(options)}`,
      );
    }
  });

  it('tells a decorated method whose app never imported the module what to do', async () => {
    @Injectable()
    class Orphan {
      @WithLock('x:<0>')
      async run(_id: string) {
        return 'ran';
      }
    }
    await assert.rejects(new Orphan().run('1'), (error: unknown) => error instanceof DistributedLockError && /DistributedLockModule\.forRoot\(\)/.test(error.message));
  });

  it('names the package to install when a backend client is missing', () => {
    assert.throws(() => loadPeer('not-an-installed-package', 'redis'), /npm install not-an-installed-package/);
  });

  it('is the package entry point once built: require(<project root>) returns the public API', () => {
    const api = require(path.resolve(__dirname, '..', '..', '..'));
    for (const name of ['DistributedLockModule', 'LockService', 'WithLock', 'LockHandle', 'LockKeyError', 'LockTimeoutError', 'LockLostError', 'LockBackendError', 'DistributedLockError', 'currentLock']) {
      assert.ok(api[name], `missing export ${name}`);
    }
  });
});
