import 'reflect-metadata';
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { Injectable, Module, type DynamicModule } from '@nestjs/common';
import { NestFactory } from '@nestjs/core';
import { DistributedLockModule, LockConfigError, LockService, WithLock } from '../../lib';

/**
 * Contract point 6: every option is checked, everywhere. A misspelt field fails loudly, naming
 * itself and the option meant, at the module level (forRoot and forRootAsync, where plain-JS and
 * ConfigService users meet it) and in every call; a number given as a string is called a string.
 */

/** Options as plain JS or a config file would give them: the type checker cannot help. */
const untyped = (options: Record<string, unknown>) => options as never;

/**
 * Each misspelling and the option it must point to: suggested by name when it is a typo of it,
 * else (`tll`, three edits from `ttlMs`) at least among the options the message lists.
 */
const TYPOS = [
  { field: 'waitTimout', nearest: 'waitTimeoutMs', suggested: true },
  { field: 'waitTimeout', nearest: 'waitTimeoutMs', suggested: true },
  { field: 'ttl', nearest: 'ttlMs', suggested: true },
  { field: 'tll', nearest: 'ttlMs', suggested: false },
];

function isConfigError(field: string, nearest: string, suggested = true) {
  return (error: unknown) => {
    assert.ok(error instanceof LockConfigError, `expected LockConfigError, got ${String(error)}`);
    assert.equal(error.option, field);
    assert.ok(error.message.includes(`"${field}"`), `the message does not name "${field}": ${error.message}`);
    const named = suggested ? `did you mean "${nearest}"?` : nearest;
    assert.ok(error.message.includes(named), `the message does not point to "${nearest}": ${error.message}`);
    return true;
  };
}

/** The call's error, whether it threw at once or rejected: what a user meets with `await`. */
async function failureOf(call: () => Promise<unknown>): Promise<unknown> {
  try {
    await call();
  } catch (error) {
    return error;
  }
  assert.fail('the call succeeded');
}

function isStringError(field: string) {
  return (error: unknown) => {
    assert.ok(error instanceof LockConfigError, `expected LockConfigError, got ${String(error)}`);
    assert.equal(error.option, field);
    assert.match(error.message, /string "5000"/, `the message does not say the value is a string: ${error.message}`);
    return true;
  };
}

async function boot(lockModule: DynamicModule) {
  @Module({ imports: [lockModule] })
  class AppModule {}
  return NestFactory.createApplicationContext(AppModule, { logger: false, abortOnError: false });
}

/** A service on the memory backend, for the call-level checks. */
async function withService(use: (locks: LockService) => Promise<void>): Promise<void> {
  const app = await boot(DistributedLockModule.forRoot());
  try {
    await use(app.get(LockService));
  } finally {
    await app.close();
  }
}

describe('every option is checked, everywhere (contract point 6)', () => {
  for (const { field, nearest, suggested } of TYPOS) {
    it(`forRoot({ ${field} }) fails the boot with LockConfigError naming it and "${nearest}"`, async () => {
      await assert.rejects(boot(DistributedLockModule.forRoot(untyped({ [field]: 5000 }))), isConfigError(field, nearest, suggested));
    });

    it(`forRootAsync returning { ${field} } fails the boot the same way`, async () => {
      const lockModule = DistributedLockModule.forRootAsync({ useFactory: async () => untyped({ [field]: 5000 }) });
      await assert.rejects(boot(lockModule), isConfigError(field, nearest, suggested));
    });

    it(`@WithLock(name, { ${field} }) fails when the class is defined`, () => {
      assert.throws(() => {
        @Injectable()
        class Orders {
          @WithLock('orders', untyped({ [field]: 5000 }))
          async place(): Promise<void> {}
        }
        return Orders;
      }, isConfigError(field, nearest, suggested));
    });

    it(`withLock, acquire and tryAcquire with { ${field} } reject before taking the lock`, async () => {
      await withService(async (locks) => {
        let ran = false;
        await assert.rejects(locks.withLock('k', () => (ran = true), untyped({ [field]: 5000 })), isConfigError(field, nearest, suggested));
        assert.equal(ran, false, 'withLock ran its callback with a misspelt option');
        isConfigError(field, nearest, suggested)(await failureOf(() => locks.acquire('k', untyped({ [field]: 5000 }))));
        isConfigError(field, nearest, suggested)(await failureOf(() => locks.tryAcquire('k', untyped({ [field]: 5000 }))));
        // Nothing was taken: the lock is free.
        const lock = await locks.tryAcquire('k');
        assert.ok(lock, 'a rejected call left the lock held');
        await lock.release();
      });
    });
  }

  it("ttlMs: '5000' (a ConfigService value) is reported as a string, at the module level and in calls", async () => {
    await assert.rejects(boot(DistributedLockModule.forRoot(untyped({ ttlMs: '5000' }))), isStringError('ttlMs'));
    await assert.rejects(
      boot(DistributedLockModule.forRootAsync({ useFactory: () => untyped({ ttlMs: '5000' }) })),
      isStringError('ttlMs'),
    );
    await assert.rejects(boot(DistributedLockModule.forRoot(untyped({ serverTimeoutMs: '5000' }))), isStringError('serverTimeoutMs'));
    assert.throws(() => {
      @Injectable()
      class Orders {
        @WithLock('orders', untyped({ ttlMs: '5000' }))
        async place(): Promise<void> {}
      }
      return Orders;
    }, isStringError('ttlMs'));
    await withService(async (locks) => {
      await assert.rejects(locks.withLock('k', () => undefined, untyped({ ttlMs: '5000' })), isStringError('ttlMs'));
      isStringError('waitTimeoutMs')(await failureOf(() => locks.acquire('k', untyped({ waitTimeoutMs: '5000' }))));
      isStringError('ttlMs')(await failureOf(() => locks.tryAcquire('k', untyped({ ttlMs: '5000' }))));
    });
  });

  it('acquire and tryAcquire reject on bad options rather than throw: they return promises, so `.catch()` must see it', async () => {
    await withService(async (locks) => {
      for (const call of [() => locks.acquire('k', untyped({ ttl: 1 })), () => locks.tryAcquire('k', untyped({ ttl: 1 }))]) {
        let promise: Promise<unknown> | undefined;
        assert.doesNotThrow(() => (promise = call()), 'the call threw instead of returning a rejected promise');
        await assert.rejects(promise!, LockConfigError);
      }
    });
  });
});
