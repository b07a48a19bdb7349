import 'reflect-metadata';
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { ConsoleLogger, Logger, Module, type INestApplicationContext } from '@nestjs/common';
import { NestFactory } from '@nestjs/core';
import { DistributedLockModule, LockService } from '../../../lib';
import { CapturingLogger } from '../../support/capturing-logger';
import { sleep } from '../../support/timing';
import {
  MARGIN_MS,
  SERVER_TIMEOUT_MS,
  WAIT_TIMEOUT_MS,
  GRACE_MS,
  assertUnreachable,
  assertUnreachableWhileReconnecting,
  bounded,
  describeError,
  settled,
  timed,
  withinBound,
  type FailureContext,
} from './failure-target';

/** A boot never waits for the server: what it takes is Nest's own start-up. */
const BOOT_BOUND_MS = 2_000;
/** From the server answering again to a call made then succeeding: a reconnect, with its backoff. */
const RECOVERY_BOUND_MS = 5_000;



/**
 * Contract point 3: an application boots with its server down (the backend connects in the
 * background), its calls fail naming the server until it is up, one warning says so, and calls
 * succeed once the server is started.
 */
export function startupCases(context: FailureContext): void {
  describe('startup with the server down', () => {
    const logger = new CapturingLogger();
    let app: INestApplicationContext | undefined;
    let booting: Promise<INestApplicationContext> | undefined;
    let bootedAt = 0;

    before(async () => {
      await context.target().faults!.kill();
    });

    after(async () => {
      await context.target().faults!.restore();
      if (app) await bounded(app.close(), 10_000, 'closing the application');
      // A boot that overran its bound is closed whenever it ends, not waited for.
      else void booting?.then((late) => late.close()).catch(() => undefined);
      // The app made its logger Nest's global one: give the cases after this one the console back.
      Logger.overrideLogger(new ConsoleLogger());
    });

    it('the application boots within a bound', { timeout: 10_000 }, async (t) => {
      @Module({ imports: [DistributedLockModule.forRoot({ backend: context.target().direct.backend, serverTimeoutMs: SERVER_TIMEOUT_MS })] })
      class StartupModule {}
      const started = performance.now();
      booting = NestFactory.createApplicationContext(StartupModule, { logger, abortOnError: false });
      const boot = await settled(booting, started, BOOT_BOUND_MS + GRACE_MS);
      bootedAt = performance.now();
      t.diagnostic(`the boot ended with ${describeError(boot.error ?? 'an application')}`);
      withinBound(t, 'boot', boot.ms, BOOT_BOUND_MS);
      assert.equal(boot.error, undefined);
      app = boot.value;
    });

    it('the first acquire fails with LockServerUnreachableError naming the address within min(waitTimeoutMs, serverTimeoutMs) + margin', { timeout: 10_000 }, async (t) => {
      assert.ok(app, 'the application did not boot');
      const bound = Math.min(WAIT_TIMEOUT_MS, SERVER_TIMEOUT_MS) + MARGIN_MS;
      const outcome = await timed(() => app!.get(LockService).acquire(context.newKey(), { waitTimeoutMs: WAIT_TIMEOUT_MS }), bound + GRACE_MS);
      t.diagnostic(`acquire ended with ${describeError(outcome.error ?? 'a lock')}`);
      withinBound(t, 'acquire', outcome.ms, bound);
      assertUnreachable(outcome, context.target().direct.address, 'acquire');
    });

    it('tryAcquire fails with LockServerUnreachableError naming the address within serverTimeoutMs + margin', { timeout: 10_000 }, async (t) => {
      assert.ok(app, 'the application did not boot');
      const bound = SERVER_TIMEOUT_MS + MARGIN_MS;
      const outcome = await timed(() => app!.get(LockService).tryAcquire(context.newKey()), bound + GRACE_MS);
      t.diagnostic(`tryAcquire ended with ${describeError(outcome.error ?? 'a lock or null')}`);
      withinBound(t, 'tryAcquire', outcome.ms, bound);
      assertUnreachable(outcome, context.target().direct.address, 'tryAcquire');
    });

    it('one log line at boot names the backend and its address', async (t) => {
      assert.ok(app, 'the application did not boot');
      const { backend, address } = context.target().direct;
      const lines = logger.entries.filter((entry) => entry.level === 'log' && entry.context === 'DistributedLock' && entry.message.startsWith('Locks on the'));
      t.diagnostic(`boot lines: ${JSON.stringify(lines)}`);
      assert.equal(lines.length, 1, `expected one boot line; the log: ${JSON.stringify(logger.entries)}`);
      assert.ok(lines[0].message.includes(`${backend.type} backend`) && lines[0].message.includes(address), lines[0].message);
    });

    it('one warning names the address once the server was not reached within serverTimeoutMs', { timeout: 10_000 }, async (t) => {
      assert.ok(app, 'the application did not boot');
      await sleep(Math.max(0, bootedAt + SERVER_TIMEOUT_MS + MARGIN_MS - performance.now()));
      const address = context.target().direct.address;
      const warnings = logger.entries.filter((entry) => entry.level === 'warn' && entry.message.includes(address));
      t.diagnostic(`warnings naming ${address}: ${JSON.stringify(warnings)}`);
      assert.equal(warnings.length, 1, `expected one warning naming ${address}; the log: ${JSON.stringify(logger.entries)}`);
    });

    it('once the server is started, a call succeeds within a bound (calls before the reconnect say unreachable)', { timeout: 30_000 }, async (t) => {
      assert.ok(app, 'the application did not boot');
      await context.target().faults!.start();
      const started = performance.now();
      const failures: string[] = [];
      let succeeded = false;
      for (;;) {
        const left = RECOVERY_BOUND_MS - (performance.now() - started);
        if (left <= 0) break;
        const outcome = await timed(() => app!.get(LockService).acquire(context.newKey(), { waitTimeoutMs: left }), left + GRACE_MS);
        if (outcome.error === undefined) {
          await outcome.value!.release();
          succeeded = true;
          break;
        }
        failures.push(describeError(outcome.error));
        assertUnreachableWhileReconnecting(outcome, context.target().direct, 'an acquire while the client reconnects');
      }
      const ms = performance.now() - started;
      // A server that refuses connections fails calls at once, so a loop makes many: the first and last say enough.
      t.diagnostic(`${failures.length} calls failed first${failures.length ? `; the first: ${failures[0]}; the last: ${failures.at(-1)}` : ''}`);
      withinBound(t, 'a call succeeded after the server started', ms, RECOVERY_BOUND_MS);
      assert.ok(succeeded, 'no call succeeded after the server started');
    });
  });
}
