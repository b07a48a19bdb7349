import 'reflect-metadata';
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { currentLock, DistributedLockError, LockConfigError, LockKeyError, LockLostError, LockTimeoutError, MemoryLockBackend, MemoryLockStore, WithLock, type LockGrant } from '../../lib';
import { countingBackend } from '../support/counting-backend';
import { lockServiceOver } from '../support/lock-service-factory';
import { overriddenBackend } from '../support/overridden-backend';
import { abortedWithin, sleep } from '../support/timing';

/** What the service does above any backend: leases, renewal outcomes, the async context. */
describe('LockService and its leases', () => {
  it("fires the lost signal with 'renewal-refused' the moment a renewal says the lease is gone", async () => {
    const service = lockServiceOver(overriddenBackend(() => ({ renew: async () => false })));
    const lock = await service.acquire('refused', { ttlMs: 600 });
    const acquiredAt = Date.now();
    await abortedWithin(lock.signal, 1_000);
    // The first renewal runs at ttl / 3 = 200 ms; the lease itself would last 600 ms.
    assert.ok(Date.now() - acquiredAt < 450, `lost after ${Date.now() - acquiredAt} ms`);
    assert.equal((lock.signal.reason as LockLostError).reason, 'renewal-refused');
    await lock.release();
  });

  it("keeps retrying renewals that fail to answer, and fires 'server-unreachable' at the deadline it last confirmed", async () => {
    let renewals = 0;
    const service = lockServiceOver(
      overriddenBackend(() => ({
        renew: async () => {
          renewals++;
          throw new Error('connection refused');
        },
      })),
    );
    const lock = await service.acquire('unreachable', { ttlMs: 600 });
    const acquiredAt = Date.now();
    await abortedWithin(lock.signal, 1_500);
    const lostAfterMs = Date.now() - acquiredAt;
    assert.ok(lostAfterMs >= 550 && lostAfterMs <= 1_000, `lost after ${lostAfterMs} ms, not at the 600 ms lease's end`);
    const lost = lock.signal.reason as LockLostError;
    assert.equal(lost.reason, 'server-unreachable');
    assert.match(lost.message, /could not be reached/);
    assert.doesNotMatch(lost.message, /Raise ttlMs/, 'a server that cannot be reached is not fixed by a longer lease');
    assert.match(lost.message, /connection refused/, 'the renewal error is kept');
    assert.ok(renewals >= 2, `only ${renewals} renewal attempts before the lease ran out`);
    await lock.release();
  });

  it('counts the lease from when the winning request was sent, not from when the answer arrived', async () => {
    const service = lockServiceOver(
      overriddenBackend((inner) => ({
        // As if the request had been sent 400 ms before its answer came.
        tryAcquire: async (request) => {
          const grant = await inner.tryAcquire(request);
          return grant && ({ ...grant, requestedAt: performance.now() - 400 } satisfies LockGrant);
        },
      })),
    );
    const lock = (await service.tryAcquire('slow-answer', { ttlMs: 600, renew: false }))!;
    const grantedAt = Date.now();
    await abortedWithin(lock.signal, 1_000);
    assert.ok(Date.now() - grantedAt < 300, `lost ${Date.now() - grantedAt} ms after the answer: counted from the answer`);
    await lock.release();
  });

  it('extend() rejects when the lock was lost while the renewal was on its way, even if the server then said yes', async () => {
    const service = lockServiceOver(
      overriddenBackend(() => ({
        renew: async () => {
          await sleep(100);
          return true;
        },
      })),
    );
    const lock = await service.acquire('extend-race', { ttlMs: 60, renew: false });
    await assert.rejects(lock.extend(10_000), LockLostError);
    assert.equal(lock.isHeld, false);
  });

  it('waitTimeoutMs 0 takes a free lock even when the server answers slowly, and refuses a held one at once', async () => {
    const service = lockServiceOver(
      overriddenBackend((inner) => ({
        tryAcquire: async (request) => {
          await sleep(30);
          return inner.tryAcquire(request);
        },
      })),
    );
    const lock = await service.acquire('zero', { waitTimeoutMs: 0 });
    const started = Date.now();
    await assert.rejects(service.acquire('zero', { waitTimeoutMs: 0 }), LockTimeoutError);
    assert.ok(Date.now() - started < 500);
    await lock.release();
  });

  it('re-enters only through the service that took the lock: another service of the process waits like a remote client', async () => {
    const store = new MemoryLockStore();
    const [a, b] = [lockServiceOver(new MemoryLockBackend(store)), lockServiceOver(new MemoryLockBackend(store))];
    await a.withLock('shared', async () => {
      assert.ok(a.current('shared'));
      assert.equal(b.current('shared'), undefined);
      assert.equal(await b.tryAcquire('shared'), null, 'another service re-entered a lock it does not hold');
      const nested = await a.tryAcquire('shared');
      assert.equal(nested?.reentrant, true);
      await nested!.release();
    });
  });

  it('currentLock() is the innermost lock still held: not one released while a child outlived it', async () => {
    const service = lockServiceOver(new MemoryLockBackend());
    let child!: Promise<string | undefined>;
    await service.withLock('parent', async () => {
      assert.equal(currentLock()?.key, 'parent');
      child = sleep(50).then(() => currentLock()?.key);
    });
    assert.equal(await child, undefined, 'a child still saw the released lock as current');
  });

  it('the async context holds while any scope is open: a sibling released first, a lock taken again, a minimum hold', async () => {
    const service = lockServiceOver(new MemoryLockBackend());
    // One scope ends while another is still inside its code.
    let releaseLong!: () => void;
    const longHeld = new Promise<void>((resolve) => (releaseLong = resolve));
    const long = service.withLock('long', async () => {
      await longHeld;
      assert.equal(currentLock()?.key, 'long', 'a scope still open lost its context when another ended');
      assert.equal((await service.tryAcquire('long'))?.reentrant, true);
    });
    await service.withLock('short', () => assert.equal(currentLock()?.key, 'short'));
    releaseLong();
    await long;
    assert.equal(currentLock(), undefined);
    // With every scope over, the next lock still re-enters.
    await service.withLock('again', async () => {
      await sleep(1);
      await service.withLock('again', async (inner) => {
        assert.equal(inner.reentrant, true);
        assert.equal(currentLock()?.key, 'again');
      });
    });
    // A lock kept for its minimum hold stays current for the work its code left running.
    let child!: Promise<string | undefined>;
    await service.withLock('kept', () => void (child = sleep(30).then(() => currentLock()?.key)), { minHoldMs: 300 });
    assert.equal(await child, 'kept', 'a lock kept for minHoldMs was no longer current for its own child');
  });

  it('inspect and forceRelease on a custom backend without them: LockConfigError naming the method, before any I/O', async () => {
    const { backend, calls } = countingBackend(overriddenBackend(() => ({ inspect: undefined, forceRelease: undefined })));
    const service = lockServiceOver(backend);
    await assert.rejects(service.inspect('stock:42'), (error: unknown) => error instanceof LockConfigError && error.option === 'backend' && /inspect\(\)/.test(error.message));
    await assert.rejects(service.forceRelease('stock:42'), (error: unknown) => error instanceof LockConfigError && /forceRelease\(\)/.test(error.message));
    assert.deepEqual(calls, { acquire: 0, tryAcquire: 0, renew: 0, release: 0, inspect: 0, forceRelease: 0 });
  });

  it('names a static method Class.method in key errors', async () => {
    lockServiceOver(new MemoryLockBackend());
    class Jobs {
      @WithLock('job:<0>')
      static async run(_id: unknown) {
        return 'ran';
      }
    }
    await assert.rejects(Jobs.run(undefined), (error: unknown) => error instanceof LockKeyError && error.method === 'Jobs.run');
  });

  it('on shutdown abandons its own waiters first, then waits for its holders to release, once each', async () => {
    const { backend, calls } = countingBackend(new MemoryLockBackend());
    const service = lockServiceOver(backend);
    const held = await Promise.all([service.acquire('one'), service.acquire('two')]);
    let granted = 0;
    const waiters = Promise.allSettled(['one', 'one', 'two'].map((name) => service.acquire(name).then(() => granted++)));
    await sleep(20);
    let shutDown = false;
    const shutdown = service.onApplicationShutdown().then(() => (shutDown = true));
    for (const outcome of await waiters) {
      assert.equal(outcome.status, 'rejected');
      assert.ok((outcome as PromiseRejectedResult).reason instanceof DistributedLockError);
      assert.match(String((outcome as PromiseRejectedResult).reason), /shutting down/);
    }
    await assert.rejects(service.acquire('three'), /shutting down/);
    await assert.rejects(service.tryAcquire('three'), /shutting down/);
    await sleep(20);
    assert.equal(shutDown, false, 'shutdown waits for the holders still running');
    assert.ok(held.every((lock) => lock.isHeld), 'a holder still running keeps its lock until its lease ends');
    await Promise.all(held.map((lock) => lock.release()));
    await shutdown;
    assert.equal(granted, 0);
    assert.equal(calls.release, 2, 'each lock is released once');
  });

  it('on shutdown tells a holder that outlives its lease that its lock was lost, and releases it', async () => {
    const service = lockServiceOver(new MemoryLockBackend());
    const lock = await service.acquire('long-job', { ttlMs: 300 });
    const started = performance.now();
    await service.onApplicationShutdown();
    const tookMs = performance.now() - started;
    assert.ok(tookMs < 300 + 200, `shutdown took ${Math.round(tookMs)} ms, bound: the 300 ms lease + 200`);
    assert.equal((lock.signal.reason as LockLostError).reason, 'backend-closed');
  });

  it('one signal passed to many waiting calls: no listener-leak warning, and its abort ends every wait with its reason', async () => {
    const service = lockServiceOver(new MemoryLockBackend());
    const warnings: string[] = [];
    const onWarning = (warning: Error) => void warnings.push(`${warning.name}: ${warning.message}`);
    process.on('warning', onWarning);
    try {
      const holder = await service.acquire('shared-signal');
      const shutdown = new AbortController();
      const reason = new Error('shutting down');
      const waits = Array.from({ length: 30 }, () => service.withLock('shared-signal', () => 'ran', { signal: shutdown.signal, waitTimeoutMs: 10_000 }));
      for (const wait of waits) wait.catch(() => undefined);
      await sleep(20);
      shutdown.abort(reason);
      const settled = await Promise.allSettled(waits);
      assert.deepEqual(settled.map((result) => (result.status === 'rejected' ? result.reason : result.value)), waits.map(() => reason));
      await holder.release();
      // A warning is emitted on the next tick.
      await sleep(10);
      assert.deepEqual(warnings.filter((warning) => /MaxListeners/.test(warning)), []);
    } finally {
      process.off('warning', onWarning);
      await service.onApplicationShutdown();
    }
  });

  it('closing the memory backend fires the lost signal of every lock it holds', async () => {
    const backend = new MemoryLockBackend();
    const service = lockServiceOver(backend);
    const lock = await service.acquire('closing');
    await backend.close();
    await abortedWithin(lock.signal, 100);
    assert.equal((lock.signal.reason as LockLostError).reason, 'backend-reported');
  });
});
