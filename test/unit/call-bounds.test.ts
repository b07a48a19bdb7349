import 'reflect-metadata';
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { Injectable, Module, type OnModuleInit } from '@nestjs/common';
import { NestFactory } from '@nestjs/core';
import {
  DistributedLockError,
  DistributedLockModule,
  LockLostError,
  LockServerUnreachableError,
  LockService,
  LockTimeoutError,
  MemoryLockBackend,
  WithLock,
  type LockBackend,
} from '../../lib';
import { countingBackend } from '../support/counting-backend';
import { lockServiceOver } from '../support/lock-service-factory';
import { overriddenBackend } from '../support/overridden-backend';
import { sleep } from '../support/timing';

/** A server that accepts requests and never answers (paused, or black-holed by the network). */
const never = () => new Promise<never>(() => undefined);

/** As a backend over such a server reports itself: its address, and why it cannot be reached. */
function silentServer(overrides: Partial<LockBackend>, inner: LockBackend = new MemoryLockBackend()): LockBackend {
  return overriddenBackend(() => ({ address: '127.0.0.1:6399', unreachable: () => new Error('connect ETIMEDOUT'), ...overrides }), inner);
}

async function timed<T>(call: Promise<T>): Promise<{ ms: number; outcome: PromiseSettledResult<T> }> {
  const started = performance.now();
  const [outcome] = await Promise.allSettled([call]);
  return { ms: Math.round(performance.now() - started), outcome };
}

function rejection(outcome: PromiseSettledResult<unknown>): unknown {
  assert.equal(outcome.status, 'rejected', 'the call should have failed');
  return (outcome as PromiseRejectedResult).reason;
}

describe('every call ends by its bound, whatever the backend does', () => {
  it('acquire on a server that never answers ends at waitTimeoutMs, naming the unreachable server', async () => {
    const service = lockServiceOver(silentServer({ acquire: never }));
    const { ms, outcome } = await timed(service.acquire('silent', { waitTimeoutMs: 300 }));
    console.log(`acquire ended after ${ms} ms; bound 300 + 100`);
    const error = rejection(outcome);
    assert.ok(error instanceof LockServerUnreachableError, `got ${String(error)}`);
    assert.match(error.message, /127\.0\.0\.1:6399/);
    assert.match(error.message, /connect ETIMEDOUT/);
    assert.ok(ms >= 290 && ms < 400, `ended after ${ms} ms`);
  });

  it('a wait that ends while the server answers is a LockTimeoutError that blames the holder', async () => {
    const service = lockServiceOver(new MemoryLockBackend());
    const holder = await service.acquire('busy');
    const { outcome } = await timed(service.acquire('busy', { waitTimeoutMs: 100 }));
    assert.ok(rejection(outcome) instanceof LockTimeoutError);
    await holder.release();
  });

  it('a grant that arrives after the wait ended is given back to the server', async () => {
    let grantLate!: () => void;
    const inner = new MemoryLockBackend();
    const { backend, calls } = countingBackend(
      overriddenBackend(
        (memory) => ({
          acquire: (request) => new Promise((resolve) => (grantLate = () => resolve(memory.tryAcquire(request).then((grant) => grant!)))),
        }),
        inner,
      ),
    );
    const service = lockServiceOver(backend);
    const { outcome } = await timed(service.acquire('late', { waitTimeoutMs: 100 }));
    assert.ok(rejection(outcome) instanceof LockTimeoutError);
    grantLate();
    await sleep(20);
    assert.equal(calls.release, 1, 'the late grant was released');
    assert.ok(await service.tryAcquire('late'), 'and the lock is free again');
  });

  it('tryAcquire and waitTimeoutMs 0 on a server that never answers end at serverTimeoutMs', async () => {
    const service = lockServiceOver(silentServer({ tryAcquire: never }), { serverTimeoutMs: 250 });
    for (const call of [() => service.tryAcquire('silent'), () => service.acquire('silent', { waitTimeoutMs: 0 })]) {
      const { ms, outcome } = await timed(call());
      console.log(`try ended after ${ms} ms; bound 250 + 100`);
      assert.ok(rejection(outcome) instanceof LockServerUnreachableError);
      assert.ok(ms >= 240 && ms < 350, `ended after ${ms} ms`);
    }
  });

  it('inspect and forceRelease on a server that never answers end at serverTimeoutMs, naming the unreachable server', async () => {
    const service = lockServiceOver(silentServer({ inspect: never, forceRelease: never }), { serverTimeoutMs: 250 });
    const calls: Array<[string, () => Promise<unknown>]> = [
      ['inspect', () => service.inspect('silent')],
      ['forceRelease', () => service.forceRelease('silent')],
    ];
    for (const [what, call] of calls) {
      const { ms, outcome } = await timed(call());
      console.log(`${what} ended after ${ms} ms; bound 250 + 100`);
      const error = rejection(outcome);
      assert.ok(error instanceof LockServerUnreachableError, `${what}: got ${String(error)}`);
      assert.match(error.message, /127\.0\.0\.1:6399/);
      assert.ok(ms >= 240 && ms < 350, `${what} ended after ${ms} ms`);
    }
  });

  it('a release that never answers does not keep the caller past serverTimeoutMs', async () => {
    const service = lockServiceOver(silentServer({ release: never }), { serverTimeoutMs: 200 });
    const lock = await service.acquire('stuck-release');
    const { ms } = await timed(lock.release());
    console.log(`release returned after ${ms} ms; bound 200 + 100`);
    assert.ok(ms < 300, `release kept the caller ${ms} ms`);
  });

  it('a release does not keep the caller past the end of the lease', async () => {
    const service = lockServiceOver(silentServer({ release: never, renew: never }), { serverTimeoutMs: 10_000 });
    const lock = await service.acquire('short-lease', { ttlMs: 400 });
    await sleep(200);
    const { ms } = await timed(lock.release());
    console.log(`release returned after ${ms} ms; the lease had about 200 ms left`);
    assert.ok(ms < 300, `release kept the caller ${ms} ms past a lease with 200 ms left`);
  });

  it('renewals that never answer end the lease as server-unreachable, at its deadline', async () => {
    const service = lockServiceOver(silentServer({ renew: never }), { serverTimeoutMs: 100 });
    let lostAfterMs = Infinity;
    const outcome = await Promise.allSettled([
      service.withLock(
        'paused-server',
        async (lock) => {
          const started = performance.now();
          lock.signal.addEventListener('abort', () => (lostAfterMs = performance.now() - started));
          await sleep(900);
        },
        { ttlMs: 450 },
      ),
    ]);
    const error = rejection(outcome[0]);
    assert.ok(error instanceof LockLostError, `got ${String(error)}`);
    assert.equal(error.reason, 'server-unreachable');
    console.log(`lost signal after ${Math.round(lostAfterMs)} ms; bound: the 450 ms lease (less its drift allowance)`);
    assert.ok(lostAfterMs <= 450, `the lost signal fired ${Math.round(lostAfterMs)} ms in, after the lease ended`);
  });

  it('extend() racing a release is not reported as a lost lock', async () => {
    let answer!: (value: boolean) => void;
    const service = lockServiceOver(overriddenBackend(() => ({ renew: () => new Promise<boolean>((resolve) => (answer = resolve)) })));
    const lock = await service.acquire('extend-race');
    const extending = lock.extend(5_000);
    await lock.release();
    answer(false);
    const error = await extending.then(() => undefined, (reason: unknown) => reason);
    assert.ok(error instanceof DistributedLockError && !(error instanceof LockLostError), `got ${String(error)}`);
    assert.equal(lock.signal.aborted, false);
  });
});

describe('module lifecycle', () => {
  it('a custom backend is not closed by the module: its owner closes it', async () => {
    const { backend, calls } = countingBackend(new MemoryLockBackend());
    let closed = 0;
    const custom = overriddenBackend(() => ({ close: async () => void closed++ }), backend);
    @Module({ imports: [DistributedLockModule.forRoot({ backend: { type: 'custom', backend: custom } })] })
    class CustomApp {}
    const app = await NestFactory.createApplicationContext(CustomApp, { logger: false });
    await app.close();
    assert.equal(closed, 0);
    assert.equal(calls.release, 0);
  });

  it('an application whose boot failed after the lock module started does not serve @WithLock', async () => {
    @Injectable()
    class Jobs {
      @WithLock('job', { waitTimeoutMs: 50 })
      async run(): Promise<string> {
        return 'ran';
      }
    }
    @Injectable()
    class Broken implements OnModuleInit {
      onModuleInit(): void {
        throw new Error('boot failed');
      }
    }
    @Module({ imports: [DistributedLockModule.forRoot()], providers: [Broken] })
    class BrokenApp {}
    @Module({ imports: [DistributedLockModule.forRoot()], providers: [Jobs] })
    class GoodApp {}
    const good = await NestFactory.createApplicationContext(GoodApp, { logger: false });
    try {
      await assert.rejects(NestFactory.createApplicationContext(BrokenApp, { logger: false, abortOnError: false }), /boot failed/);
      // The broken app's LockService initialised last, over a memory store of its own. @WithLock
      // must still use the good app's: the lock held there makes the method wait, then time out.
      const held = await good.get(LockService).acquire('job');
      await assert.rejects(good.get(Jobs).run(), LockTimeoutError);
      await held.release();
      assert.equal(await good.get(Jobs).run(), 'ran');
    } finally {
      await good.close();
    }
  });
});
