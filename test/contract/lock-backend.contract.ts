import 'reflect-metadata';
import assert from 'node:assert/strict';
import { setImmediate as tick } from 'node:timers/promises';
import { after, afterEach, before, describe, it } from 'node:test';
import { LockKeyError, LockLostError, LockTimeoutError, type BackendOptions, type LockBackend, type LockService } from '../../lib';
import { countingBackend } from '../support/counting-backend';
import { lockServiceOver } from '../support/lock-service-factory';
import { abortedWithin, assertExclusive, eventually, sleep, type HoldInterval } from '../support/timing';
import { unless, type BackendCapabilities } from './capabilities';
import { runDecoratorContract } from './decorator.contract';
import { inspectCases } from './inspect.contract';
import { primitiveCases } from './primitives.contract';

/** A running server (or cluster) and a way to connect another client to it. */
export interface ContractTarget {
  /** A new client of the same server, as another process would have. */
  newClient(): Promise<LockBackend>;
  /** The same server as a `backend` module option (JSON-safe), for a child process; omitted for an in-process backend. */
  processBackend?: BackendOptions;
  stop(): Promise<void>;
}

/** What the backend offers (all by default): a case that needs what it lacks is skipped, saying why. */
export interface ContractOptions extends BackendCapabilities {
  name: string;
  start(): Promise<ContractTarget>;
  /** The lease the expiry tests use; backends with coarse leases raise it. Default 600. */
  shortTtlMs?: number;
  /** How long after a lease ends the backend may take to hand the lock on. Default 300. */
  expiryBoundMs?: number;
  /** Gap between waiters' arrivals in the FIFO test, so their order is known. Default 30. */
  arrivalGapMs?: number;
  /** The server's lease granularity (inspect's expiresInMs may reach the rounded-up lease). Default 1. */
  leaseRoundingMs?: number;
}

/**
 * The behaviour every backend shares, run against each one (Curator's TestInterProcessMutexBase
 * and madelson/DistributedLock's core cases are the models). Each test uses its own key and
 * clients; several clients of one server stand for several processes.
 */
export function runLockContract(options: ContractOptions): void {
  const shortTtlMs = options.shortTtlMs ?? 600;
  const expiryBoundMs = options.expiryBoundMs ?? 300;
  const arrivalGapMs = options.arrivalGapMs ?? 30;
  const fencing = options.fencing !== false;

  describe(`lock contract: ${options.name}`, () => {
    let target: ContractTarget;
    const services: LockService[] = [];
    let keySeq = 0;
    const newKey = () => `contract-${process.pid}-${Date.now().toString(36)}-${++keySeq}`;

    before(async () => {
      target = await options.start();
    });
    after(async () => {
      await target?.stop();
    });
    afterEach(async () => {
      await Promise.all(services.splice(0).map((service) => service.onApplicationShutdown()));
    });

    /**
     * A new client that has already connected (and opened its session, where the backend has
     * one): backends connect lazily, and a first acquisition that pays for the connection would
     * overtake nothing in the FIFO test only by luck.
     */
    async function newBackend(): Promise<LockBackend> {
      const backend = await target.newClient();
      const warmUp = await backend.tryAcquire({ key: `warm-up-${newKey()}`, owner: `warm-up-${keySeq}`, ttlMs: 10_000 });
      if (warmUp) await backend.release(warmUp);
      return backend;
    }

    async function client(backend?: LockBackend): Promise<LockService> {
      const service = lockServiceOver(backend ?? (await newBackend()));
      services.push(service);
      return service;
    }

    it('lets one of 1000 concurrent callers hold the lock at a time, with increasing tokens', async () => {
      const key = newKey();
      const clients = [await client(), await client()];
      const intervals: HoldInterval[] = [];
      let inside = 0;
      await Promise.all(
        Array.from({ length: 1000 }, (_, i) =>
          clients[i % 2].withLock(
            key,
            async (lock) => {
              const start = process.hrtime.bigint();
              assert.equal(++inside, 1, 'two holders inside at once');
              await tick();
              inside--;
              intervals.push({ start, end: process.hrtime.bigint(), fencingToken: lock.fencingToken, holder: `caller ${i}` });
            },
            { waitTimeoutMs: 120_000 },
          ),
        ),
      );
      assert.equal(intervals.length, 1000);
      assertExclusive(intervals, { tokens: fencing });
    });

    it('wakes waiters in the order they queued (FIFO), across clients', { skip: unless(options, 'fifo') }, async () => {
      const key = newKey();
      const clients = [await client(), await client(), await client()];
      const holder = await clients[0].acquire(key);
      const order: number[] = [];
      const waiters: Promise<void>[] = [];
      for (let i = 0; i < 6; i++) {
        waiters.push(clients[i % 3].withLock(key, () => void order.push(i)));
        await sleep(arrivalGapMs);
      }
      await holder.release();
      await Promise.all(waiters);
      assert.deepEqual(order, [0, 1, 2, 3, 4, 5]);
    });

    it('is re-entrant within one async call chain, with no backend call, and releases at the outermost exit', async () => {
      const key = newKey();
      const { backend, calls } = countingBackend(await newBackend());
      const service = await client(backend);
      await service.withLock(key, async (outer) => {
        const callsBefore = { ...calls };
        await service.withLock(key, async (inner) => {
          assert.equal(inner.fencingToken, outer.fencingToken);
          assert.equal(service.current(key), outer);
        });
        const again = await service.acquire(key);
        assert.equal(again.reentrant, true);
        await again.release();
        // Children started inside the lock inherit the chain.
        await Promise.all([1, 2].map(() => service.withLock(key, () => tick())));
        assert.deepEqual({ ...calls, renew: callsBefore.renew }, callsBefore, 'a nested acquisition reached the backend');
        assert.equal(outer.isHeld, true, 'an inner exit released the outer lock');
      });
      assert.equal(calls.release, 1);
      assert.equal(service.current(key), undefined);
    });

    it('makes another async chain of the same process wait', async () => {
      const key = newKey();
      const service = await client();
      let inside = false;
      const first = service.withLock(key, async () => {
        inside = true;
        await sleep(150);
        inside = false;
      });
      await eventually(() => inside, 5_000, 'the first holder');
      assert.equal(await service.tryAcquire(key), null, 'another chain re-entered a lock it does not hold');
      const second = service.withLock(key, () => assert.equal(inside, false, 'second chain entered while the first held'));
      await Promise.all([first, second]);
    });

    it('gives up after waitTimeoutMs with LockTimeoutError and leaves the queue', async () => {
      const key = newKey();
      const [a, b, c] = [await client(), await client(), await client()];
      const holder = await a.acquire(key);
      const started = Date.now();
      await assert.rejects(b.acquire(key, { waitTimeoutMs: 200 }), (error: unknown) => {
        assert.ok(error instanceof LockTimeoutError, `expected LockTimeoutError, got ${String(error)}`);
        assert.equal(error.key, key);
        assert.ok(error.waitedMs >= 190, `waited only ${error.waitedMs} ms`);
        return true;
      });
      assert.ok(Date.now() - started < 2_000, 'the timeout fired late');
      await holder.release();
      // The lease is 30 s: a queue blocked by the waiter that left would show as a timeout here.
      const next = await c.acquire(key, { waitTimeoutMs: 3_000 });
      await next.release();
    });

    it('stops waiting when the caller aborts, with the abort reason', async () => {
      const key = newKey();
      const [a, b] = [await client(), await client()];
      const holder = await a.acquire(key);
      const controller = new AbortController();
      const waiting = b.acquire(key, { signal: controller.signal });
      await sleep(50);
      const reason = new Error('caller gave up');
      controller.abort(reason);
      await assert.rejects(waiting, (error) => error === reason);
      await holder.release();
      await (await b.acquire(key, { waitTimeoutMs: 3_000 })).release();
    });

    it('tryAcquire returns null on a held key and a handle on a free one, without waiting', async () => {
      const key = newKey();
      const [a, b] = [await client(), await client()];
      const holder = await a.acquire(key);
      const started = Date.now();
      assert.equal(await b.tryAcquire(key), null);
      assert.ok(Date.now() - started < 1_000, 'tryAcquire waited');
      await holder.release();
      const taken = await b.tryAcquire(key);
      assert.ok(taken, 'tryAcquire failed on a free key');
      if (fencing) assert.ok(taken.fencingToken > holder.fencingToken);
      await taken.release();
    });

    it('hands out strictly increasing fencing tokens over successive grants, across clients', { skip: unless(options, 'fencing') }, async () => {
      const key = newKey();
      const clients = [await client(), await client()];
      const tokens: bigint[] = [];
      for (let i = 0; i < 10; i++) {
        const lock = await clients[i % 2].acquire(key);
        tokens.push(lock.fencingToken);
        await lock.release();
      }
      for (let i = 1; i < tokens.length; i++) assert.ok(tokens[i] > tokens[i - 1], `tokens ${tokens.join(', ')}`);
    });

    it('a holder that stops renewing loses the lock within its ttl, and its late release does not disturb the next holder', async () => {
      const key = newKey();
      const [a, b, c] = [await client(), await client(), await client()];
      const stale = await a.acquire(key, { ttlMs: shortTtlMs, renew: false });
      const started = Date.now();
      const waiter = b.acquire(key, { waitTimeoutMs: shortTtlMs * 4 + expiryBoundMs });
      await abortedWithin(stale.signal, shortTtlMs * 3);
      const lostAfter = Date.now() - started;
      assert.ok(stale.signal.reason instanceof LockLostError, 'the signal reason is not a LockLostError');
      assert.ok(lostAfter <= shortTtlMs + 100, `signal fired ${lostAfter} ms after a ${shortTtlMs} ms lease`);
      assert.ok(lostAfter >= shortTtlMs * 0.8, `signal fired ${lostAfter} ms into a ${shortTtlMs} ms lease`);
      const next = await waiter;
      const handedAfter = Date.now() - started;
      assert.ok(handedAfter <= shortTtlMs + expiryBoundMs, `next holder waited ${handedAfter} ms for a ${shortTtlMs} ms lease`);
      if (fencing) assert.ok(next.fencingToken > stale.fencingToken);
      assert.equal(stale.isHeld, false);
      await stale.release();
      await stale.release();
      assert.equal(await c.tryAcquire(key), null, "the stale holder's release freed the new holder's lock");
      assert.equal(next.isHeld, true);
      await next.release();
      await next.release();
      const after = await c.tryAcquire(key);
      assert.ok(after, 'the key stayed locked after its holder released');
      await after.release();
    });

    it('renews the lease while the lock is held', async () => {
      const key = newKey();
      const [a, b] = [await client(), await client()];
      const lock = await a.acquire(key, { ttlMs: shortTtlMs });
      await sleep(shortTtlMs * 2.5);
      assert.equal(lock.isHeld, true);
      assert.equal(lock.signal.aborted, false);
      assert.equal(await b.tryAcquire(key), null);
      await lock.release();
      await assert.rejects(lock.extend(), /released/);
    });

    it('extend() moves the lease out, at the server too', async () => {
      const key = newKey();
      const [a, b] = [await client(), await client()];
      const lock = await a.acquire(key, { ttlMs: shortTtlMs, renew: false });
      await sleep(shortTtlMs / 3);
      await lock.extend(shortTtlMs * 3);
      await sleep(shortTtlMs); // past the first lease's end
      assert.equal(lock.isHeld, true, 'the extended lease ended with the first one');
      assert.equal(await b.tryAcquire(key), null, 'the server let the first lease end');
      await lock.release();
    });

    it("a release or renewal with another owner's id changes nothing", async () => {
      const key = newKey();
      const [holderBackend, intruder] = [await newBackend(), await newBackend()];
      const grant = await holderBackend.acquire({ key, owner: 'rightful', ttlMs: 30_000, signal: new AbortController().signal });
      const forged = { ...grant, owner: 'intruder' };
      assert.equal(await intruder.renew(forged, 30_000), false);
      await intruder.release(forged);
      await holderBackend.release(forged);
      const probe = { key, owner: 'probe', ttlMs: 30_000 };
      assert.equal(await intruder.tryAcquire(probe), null, "a forged release freed the holder's lock");
      assert.equal(await holderBackend.renew(grant, 30_000), true);
      await holderBackend.release(grant);
      const after = await intruder.tryAcquire(probe);
      assert.ok(after, 'the rightful release did not free the lock');
      await intruder.release(after);
      await Promise.all([holderBackend.close(), intruder.close()]);
    });

    it('withLock rethrows the handler error after releasing', async () => {
      const key = newKey();
      const [a, b] = [await client(), await client()];
      const failure = new Error('handler failed');
      await assert.rejects(a.withLock(key, () => Promise.reject(failure)), (error) => error === failure);
      const next = await b.tryAcquire(key);
      assert.ok(next, 'the lock was left behind after the handler threw');
      await next.release();
    });

    it('withLock ends with LockLostError when the lock was lost during the handler, unless onLockLost is ignore', async () => {
      const key = newKey();
      const a = await client();
      const lostOptions = { ttlMs: shortTtlMs, renew: false } as const;
      await assert.rejects(
        a.withLock(key, (lock) => abortedWithin(lock.signal, shortTtlMs * 3).then(() => 'done'), lostOptions),
        // Which side notices first (our deadline, or a backend that reports expiry) is a timer race.
        (error: unknown) =>
          error instanceof LockLostError && error.key === key && ['lease-expired', 'backend-reported'].includes(error.reason),
      );
      const result = await a.withLock(key, (lock) => abortedWithin(lock.signal, shortTtlMs * 3).then(() => 'done'), {
        ...lostOptions,
        onLockLost: 'ignore',
      });
      assert.equal(result, 'done');
    });

    it('on shutdown lets a running holder finish, then the lock goes to another client at once', async () => {
      const key = newKey();
      const closing = lockServiceOver(await newBackend());
      const other = await client();
      const lock = await closing.acquire(key);
      const waiter = other.acquire(key, { waitTimeoutMs: 10_000 });
      await sleep(arrivalGapMs);
      const shutdown = closing.onApplicationShutdown();
      await sleep(100);
      assert.equal(lock.isHeld, true, 'a holder still running keeps its lock while the app shuts down');
      const releasedAt = Date.now();
      await lock.release();
      const next = await waiter;
      // The lease is 30 s: getting the lock this soon means the release reached the server.
      assert.ok(Date.now() - releasedAt < 2_000, `the waiter got the lock ${Date.now() - releasedAt} ms after the release`);
      await shutdown;
      assert.equal(lock.signal.aborted, false, 'a lock released by its holder was not lost');
      await next.release();
    });

    it('on shutdown tells a holder that outlives its lease that it lost the lock, and releases it for other clients', async () => {
      const key = newKey();
      const closing = lockServiceOver(await newBackend());
      const other = await client();
      const lock = await closing.acquire(key, { ttlMs: shortTtlMs });
      const started = Date.now();
      const waiter = other.acquire(key, { waitTimeoutMs: 10_000 });
      await sleep(arrivalGapMs);
      await closing.onApplicationShutdown();
      assert.equal((lock.signal.reason as LockLostError).reason, 'backend-closed');
      const next = await waiter;
      const bound = shortTtlMs + expiryBoundMs + 1_000;
      assert.ok(Date.now() - started < bound, `the waiter got the lock after ${Date.now() - started} ms, bound ${bound}`);
      await next.release();
    });

    it('rejects bad names with LockKeyError before any backend call', async () => {
      const { backend, calls } = countingBackend(await newBackend());
      const service = await client(backend);
      for (const bad of [undefined, null, '', Number.NaN, {}, [], 42]) {
        await assert.rejects(service.acquire(bad as never), LockKeyError);
        await assert.rejects(service.tryAcquire(bad as never), LockKeyError);
        let ran = false;
        await assert.rejects(service.withLock(bad as never, () => (ran = true)), LockKeyError);
        assert.equal(ran, false);
      }
      assert.deepEqual(calls, { acquire: 0, tryAcquire: 0, renew: 0, release: 0, inspect: 0, forceRelease: 0 });
    });

    inspectCases({ processBackend: () => target.processBackend, newBackend, client, newKey, leaseRoundingMs: options.leaseRoundingMs, fifo: options.fifo });

    primitiveCases({ client, newBackend, newKey, modes: options.modes !== false, fencing });

    runDecoratorContract(() => target.newClient(), options.modes !== false);
  });
}
