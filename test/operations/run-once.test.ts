import 'reflect-metadata';
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { Injectable, Module, type LoggerService } from '@nestjs/common';
import { NestFactory } from '@nestjs/core';
import { DistributedLockModule, LockConfigError, LockService, LockTimeoutError, MemoryLockBackend, MemoryLockStore, WithLock } from '../../lib';
import { lockServiceOver } from '../support/lock-service-factory';
import { sleep } from '../support/timing';

/** Two services over one store: two processes sharing one lock server. */
function twoProcesses() {
  const store = new MemoryLockStore();
  return [lockServiceOver(new MemoryLockBackend(store)), lockServiceOver(new MemoryLockBackend(store))] as const;
}

describe("onTimeout: 'skip'", () => {
  it('does not run the code and resolves to undefined when the lock stays busy past waitTimeoutMs', async () => {
    const [a, b] = twoProcesses();
    const held = await a.acquire('report');
    let ran = false;
    const started = performance.now();
    const result = await b.withLock('report', () => (ran = true), { onTimeout: 'skip', waitTimeoutMs: 80 });
    const waitedMs = performance.now() - started;
    console.log(`skipped after ${waitedMs.toFixed(0)} ms (waitTimeoutMs 80)`);
    assert.equal(result, undefined);
    assert.equal(ran, false);
    assert.ok(waitedMs >= 75, `skipped after ${waitedMs} ms, before waitTimeoutMs`);
    // The default still throws.
    await assert.rejects(b.withLock('report', () => true, { waitTimeoutMs: 0 }), LockTimeoutError);
    await held.release();
    assert.equal(await b.withLock('report', () => 'ran', { onTimeout: 'skip', waitTimeoutMs: 0 }), 'ran');
    await Promise.all([a.onApplicationShutdown(), b.onApplicationShutdown()]);
  });

  it('on @WithLock in a Nest app: a busy lock skips the method with a debug line and nothing at error or warn level', async () => {
    const logged: Array<{ level: string; message: string }> = [];
    const record = (level: string) => (message: unknown) => void logged.push({ level, message: String(message) });
    const logger: LoggerService = { log: record('log'), error: record('error'), warn: record('warn'), debug: record('debug'), verbose: record('verbose') };
    let runs = 0;
    @Injectable()
    class NightlyReport {
      @WithLock('nightly-report', { onTimeout: 'skip', waitTimeoutMs: 0 })
      async run(): Promise<string> {
        runs++;
        return 'done';
      }
    }
    @Module({ imports: [DistributedLockModule.forRoot()], providers: [NightlyReport] })
    class AppModule {}
    const app = await NestFactory.createApplicationContext(AppModule, { logger });
    try {
      const held = await app.get(LockService).acquire('nightly-report');
      assert.equal(await app.get(NightlyReport).run(), undefined);
      assert.equal(runs, 0);
      await held.release();
      assert.equal(await app.get(NightlyReport).run(), 'done');
      assert.equal(runs, 1);
    } finally {
      await app.close();
    }
    const skipLine = logged.find((line) => line.message.includes('NightlyReport.run skipped'));
    assert.equal(skipLine?.level, 'debug', JSON.stringify(logged));
    assert.deepEqual(logged.filter((line) => line.level === 'error' || line.level === 'warn'), []);
  });
});

describe('minHoldMs', () => {
  it('keeps the lock at least minHoldMs after it was taken, without delaying the caller', async () => {
    const [a, b] = twoProcesses();
    const started = performance.now();
    assert.equal(await a.withLock('job', () => 'quick', { minHoldMs: 300 }), 'quick');
    const returnedAfterMs = performance.now() - started;
    console.log(`withLock returned after ${returnedAfterMs.toFixed(1)} ms (minHoldMs 300)`);
    assert.ok(returnedAfterMs < 100, `the caller waited ${returnedAfterMs} ms for the minimum hold`);
    // Another process trying meanwhile finds it held...
    assert.equal(await b.tryAcquire('job'), null);
    await sleep(150);
    assert.equal(await b.tryAcquire('job'), null);
    // ...and gets it once the minimum hold has passed.
    const next = await b.acquire('job', { waitTimeoutMs: 1_000 });
    const freedAfterMs = performance.now() - started;
    console.log(`the next holder got it after ${freedAfterMs.toFixed(0)} ms (bound: >= 300)`);
    assert.ok(freedAfterMs >= 295 && freedAfterMs < 600, `released after ${freedAfterMs} ms`);
    await next.release();
    await Promise.all([a.onApplicationShutdown(), b.onApplicationShutdown()]);
  });

  it('holds even when the code throws, and releases at once when the code ran longer than minHoldMs', async () => {
    const [a, b] = twoProcesses();
    await assert.rejects(a.withLock('failing-job', () => Promise.reject(new Error('job failed')), { minHoldMs: 200 }), /job failed/);
    assert.equal(await b.tryAcquire('failing-job'), null);
    await a.withLock('slow-job', () => sleep(60), { minHoldMs: 20 });
    const next = await b.tryAcquire('slow-job');
    assert.ok(next, 'a job longer than minHoldMs must release when it ends');
    await next.release();
    await Promise.all([a.onApplicationShutdown(), b.onApplicationShutdown()]);
  });

  it('shutdown releases a lock still in its minimum hold at once', async () => {
    const [a, b] = twoProcesses();
    await a.withLock('long-hold', () => undefined, { minHoldMs: 20_000, ttlMs: 30_000 });
    assert.equal(await b.tryAcquire('long-hold'), null);
    const started = performance.now();
    await a.onApplicationShutdown();
    const shutdownMs = performance.now() - started;
    console.log(`shutdown took ${shutdownMs.toFixed(0)} ms with a 20 s minimum hold pending (bound 1000)`);
    assert.ok(shutdownMs < 1_000);
    const next = await b.tryAcquire('long-hold');
    assert.ok(next, 'the min-held lock must be released by shutdown');
    await next.release();
    await b.onApplicationShutdown();
  });

  it('is validated like every option, before any backend call', async () => {
    const [a] = twoProcesses();
    await assert.rejects(a.withLock('x', () => 1, { minHoldMs: 5_000, ttlMs: 1_000 }), (error: LockConfigError) => error.option === 'minHoldMs' && /ttlMs \(1000\)/.test(error.message));
    await assert.rejects(a.withLock('x', () => 1, { minHoldMs: -1 }), (error: LockConfigError) => error.option === 'minHoldMs');
    await assert.rejects(a.withLock('x', () => 1, { minHoldMs: '500' as never }), /the string "500"/);
    await assert.rejects(a.withLock('x', () => 1, { minHold: 5 } as never), (error: LockConfigError) => error.option === 'minHold' && /"minHoldMs"/.test(error.message));
    await assert.rejects(a.withLock('x', () => 1, { onTimeout: 'ignore' as never }), (error: LockConfigError) => error.option === 'onTimeout');
    await assert.rejects(a.withLock('x', () => 1, { onTimout: 'skip' } as never), /did you mean "onTimeout"/);
    // Only code run under the lock can be skipped or held on: acquire and tryAcquire refuse them.
    await assert.rejects(a.acquire('x', { onTimeout: 'skip' } as never), (error: LockConfigError) => error.option === 'onTimeout');
    await assert.rejects(a.tryAcquire('x', { minHoldMs: 10 } as never), (error: LockConfigError) => error.option === 'minHoldMs');
    assert.throws(() => {
      class Job {
        @WithLock('job', { minHoldMs: 2_000, ttlMs: 1_000 })
        async run() {}
      }
      return Job;
    }, LockConfigError);
    await a.onApplicationShutdown();
  });
});
