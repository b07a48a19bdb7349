import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { LockConfigError, LockKeyError, LockModeError, LockTimeoutError, type LockBackend, type LockHandle, type LockService } from '../../lib';
import { countingBackend } from '../support/counting-backend';
import { eventually, meetingOf, mostAtOnce, sleep, type HoldInterval } from '../support/timing';

/** What the primitive cases need from the lock contract's suite. */
export interface PrimitiveContext {
  client(backend?: LockBackend): Promise<LockService>;
  newBackend(): Promise<LockBackend>;
  newKey(): string;
  /** Read locks and semaphores: false for a backend that grants only the exclusive lock (it must refuse them). */
  modes: boolean;
  fencing: boolean;
}

const NO_CALLS = { acquire: 0, tryAcquire: 0, renew: 0, release: 0, inspect: 0, forceRelease: 0 };

/** A critical section that records its interval and token. */
function recorder(intervals: HoldInterval[], holder: string, holdMs: number) {
  return async (lock: LockHandle) => {
    const start = process.hrtime.bigint();
    await sleep(holdMs);
    intervals.push({ start, end: process.hrtime.bigint(), fencingToken: lock.fencingToken, holder });
  };
}

/** Tokens are unique, and a hold that ended before another began has the lower token. */
function assertTokensFollowGrants(intervals: readonly HoldInterval[]): void {
  assert.equal(new Set(intervals.map((interval) => interval.fencingToken)).size, intervals.length, 'two grants share a token');
  for (const a of intervals) {
    for (const b of intervals) {
      if (a.end <= b.start) assert.ok(a.fencingToken < b.fencingToken, `${a.holder} (token ${a.fencingToken}) ended before ${b.holder} (token ${b.fencingToken}) began`);
    }
  }
}

/**
 * Read-write locks, semaphores and several names at once, on every backend, through LockService
 * with several clients standing for several processes.
 */
export function primitiveCases(context: PrimitiveContext): void {
  const { client, newKey } = context;
  const noModes = context.modes ? false : 'the backend grants only the exclusive lock';

  describe('read-write locks', () => {
    it('lets readers of several clients hold at once while a writer holds alone', { skip: noModes }, async () => {
      const key = newKey();
      const clients = [await client(), await client(), await client()];
      const reads: HoldInterval[] = [];
      const writes: HoldInterval[] = [];
      await Promise.all([
        ...clients.map((service, i) => service.withLock(key, recorder(reads, `reader ${i}`, 150), { mode: 'read' })),
        (async () => {
          await sleep(40);
          await clients[0].withLock(key, recorder(writes, 'writer', 50));
        })(),
        ...clients.map(async (service, i) => {
          await sleep(80);
          await service.withLock(key, recorder(reads, `late reader ${i}`, 50), { mode: 'read' });
        }),
      ]);
      assert.ok(mostAtOnce(reads.slice(0, 3)) >= 2, 'no two of three readers held at once');
      const [write] = writes;
      for (const read of reads) assert.ok(read.end <= write.start || read.start >= write.end, `${read.holder} overlapped the writer`);
      if (context.fencing) assertTokensFollowGrants([...reads, ...writes]);
    });

    it('queues a reader that arrives behind a waiting writer after that writer', { skip: noModes }, async () => {
      const key = newKey();
      const [a, b, c] = [await client(), await client(), await client()];
      const firstReader = await a.acquire(key, { mode: 'read' });
      const order: string[] = [];
      const writer = b.withLock(key, () => void order.push('writer'));
      await sleep(100);
      const lateReader = c.withLock(key, () => void order.push('late reader'), { mode: 'read' });
      await sleep(100);
      assert.deepEqual(order, [], 'someone went ahead of the first reader or overtook the waiting writer');
      await firstReader.release();
      await Promise.all([writer, lateReader]);
      assert.deepEqual(order, ['writer', 'late reader']);
    });

    it('re-enters read in read and read in write with no backend call, and refuses write in read before any I/O', { skip: noModes }, async () => {
      const key = newKey();
      const { backend, calls } = countingBackend(await context.newBackend());
      const service = await client(backend);
      await service.withLock(
        key,
        async (outer) => {
          const before = { ...calls };
          await service.withLock(key, async (inner) => assert.equal(inner.reentrant, true), { mode: 'read' });
          await assert.rejects(service.acquire(key), (error: unknown) => {
            assert.ok(error instanceof LockModeError, `expected LockModeError, got ${String(error)}`);
            assert.match(error.message, /read mode.*write mode/);
            assert.equal(error.heldMode, 'read');
            assert.equal(error.requestedMode, 'write');
            return true;
          });
          assert.deepEqual({ ...calls, renew: before.renew }, before, 'a nested call reached the backend');
          assert.equal(outer.isHeld, true);
        },
        { mode: 'read' },
      );
      await service.withLock(key, async () => {
        const before = { ...calls };
        await service.withLock(key, async (inner) => assert.equal(inner.reentrant, true), { mode: 'read' });
        assert.deepEqual({ ...calls, renew: before.renew }, before, 'read inside write reached the backend');
      });
    });

    it("rejects a mode other than 'write' and 'read' with LockConfigError before any I/O", async () => {
      const { backend, calls } = countingBackend(await context.newBackend());
      const service = await client(backend);
      for (const mode of ['exclusive', 'permit', 'READ', 1]) {
        await assert.rejects(service.acquire(newKey(), { mode: mode as never }), (error: unknown) => error instanceof LockConfigError && error.option === 'mode');
        await assert.rejects(service.withLock(newKey(), () => undefined, { mode: mode as never }), LockConfigError);
      }
      assert.deepEqual(calls, NO_CALLS);
    });

    it('refuses read locks and semaphores with LockConfigError naming other backends, before any I/O', { skip: context.modes ? 'the backend grants every mode' : false }, async () => {
      const { backend, calls } = countingBackend(await context.newBackend());
      const service = await client(backend);
      await assert.rejects(service.acquire(newKey(), { mode: 'read' }), (error: unknown) => error instanceof LockConfigError && /redis, etcd, zookeeper or postgres/.test(error.message));
      await assert.rejects(service.withSemaphore(newKey(), 2, () => undefined), LockConfigError);
      assert.deepEqual(calls, NO_CALLS);
    });
  });

  describe('semaphores', () => {
    it('lets at most `limit` of 12 callers over 3 clients hold at once, and reaches the limit', { skip: noModes }, async () => {
      const key = newKey();
      const clients = [await client(), await client(), await client()];
      const holds: HoldInterval[] = [];
      let inside = 0;
      let most = 0;
      // The first three granted hold until all three are in: whether they overlap is the lock's doing, not the machine's speed.
      const firstThree = meetingOf(3);
      await Promise.all(
        Array.from({ length: 12 }, (_, i) =>
          clients[i % 3].withSemaphore(
            key,
            3,
            async (permit) => {
              most = Math.max(most, ++inside);
              await firstThree.join();
              await recorder(holds, `caller ${i}`, 60)(permit);
              inside--;
            },
            { waitTimeoutMs: 30_000 },
          ),
        ),
      );
      assert.equal(holds.length, 12);
      assert.ok(most <= 3 && mostAtOnce(holds) <= 3, `${Math.max(most, mostAtOnce(holds))} holders at once, limit 3`);
      assert.equal(most, 3, 'the semaphore never reached its limit');
      if (context.fencing) assertTokensFollowGrants(holds);
    });

    it('grants permits first come first served', { skip: noModes }, async () => {
      const key = newKey();
      const [a, b, c] = [await client(), await client(), await client()];
      const held = [await a.acquireSemaphore(key, 2), await b.acquireSemaphore(key, 2)];
      const order: number[] = [];
      const waiters: Promise<LockHandle>[] = [];
      for (let i = 0; i < 4; i++) {
        const waiter = [a, b, c][i % 3].acquireSemaphore(key, 2, { waitTimeoutMs: 30_000 });
        waiters.push(waiter.then((permit) => (order.push(i), permit)));
        await sleep(40);
      }
      assert.deepEqual(order, []);
      // One permit at a time goes back, and each time the longest waiter, and only it, gets it.
      const freed = [held[0], held[1]];
      for (let i = 0; i < 4; i++) {
        await freed[i].release();
        await eventually(() => order.length === i + 1, 10_000, `waiter ${i} granted`);
        await sleep(30);
        assert.deepEqual(order, [0, 1, 2, 3].slice(0, i + 1), `after ${i + 1} releases`);
        freed.push(await waiters[i]);
      }
      for (const permit of freed.slice(2)) await permit.release();
    });

    it('tries a permit with waitTimeoutMs 0, and times out a full semaphore with LockTimeoutError', { skip: noModes }, async () => {
      const key = newKey();
      const [a, b] = [await client(), await client()];
      const first = await a.acquireSemaphore(key, 1, { waitTimeoutMs: 0 });
      await assert.rejects(b.acquireSemaphore(key, 1, { waitTimeoutMs: 0 }), LockTimeoutError);
      await assert.rejects(b.acquireSemaphore(key, 1, { waitTimeoutMs: 150 }), LockTimeoutError);
      assert.equal(await b.withSemaphore(key, 1, () => 'ran', { waitTimeoutMs: 0, onTimeout: 'skip' }), undefined);
      await first.release();
      const second = await b.acquireSemaphore(key, 1, { waitTimeoutMs: 0 });
      if (context.fencing) assert.ok(second.fencingToken > first.fencingToken);
      await second.release();
    });

    it('refuses a second limit for a name in use with LockConfigError naming both', { skip: noModes }, async () => {
      const key = newKey();
      const [a, b] = [await client(), await client()];
      const held = await a.acquireSemaphore(key, 3);
      await assert.rejects(b.acquireSemaphore(key, 5, { waitTimeoutMs: 1_000 }), (error: unknown) => {
        assert.ok(error instanceof LockConfigError, `expected LockConfigError, got ${String(error)}`);
        assert.match(error.message, /\b3\b/);
        assert.match(error.message, /\b5\b/);
        return true;
      });
      await held.release();
    });

    it('rejects a limit that is not a positive whole number with LockConfigError before any I/O', async () => {
      const { backend, calls } = countingBackend(await context.newBackend());
      const service = await client(backend);
      for (const limit of [0, -1, 1.5, Number.NaN, Infinity, '3', undefined, 2 ** 31]) {
        await assert.rejects(service.acquireSemaphore(newKey(), limit as never), (error: unknown) => error instanceof LockConfigError && error.option === 'limit');
        await assert.rejects(service.withSemaphore(newKey(), limit as never, () => undefined), LockConfigError);
      }
      await assert.rejects(service.withSemaphore(newKey(), 2, () => undefined, { mode: 'read' } as never), LockConfigError);
      assert.deepEqual(calls, NO_CALLS);
    });
  });

  describe('several names at once', () => {
    it('takes names listed in opposite orders by two clients 200 times each with no deadlock and no overlap', { timeout: 120_000 }, async () => {
      const [x, y] = [newKey(), newKey()];
      const [a, b] = [await client(), await client()];
      const holds = new Map<string, HoldInterval[]>([
        [x, []],
        [y, []],
      ]);
      const run = (service: LockService, names: string[], who: string) =>
        (async () => {
          for (let i = 0; i < 200; i++) {
            await service.withLock(
              names,
              async (lock) => {
                const start = process.hrtime.bigint();
                await new Promise((resolve) => setImmediate(resolve));
                const end = process.hrtime.bigint();
                for (const [name, fencingToken] of lock.fencingTokens) holds.get(name)!.push({ start, end, fencingToken, holder: `${who} ${i}` });
              },
              { waitTimeoutMs: 30_000 },
            );
          }
        })();
      await Promise.all([run(a, [x, y], 'a'), run(b, [y, x], 'b')]);
      for (const [name, intervals] of holds) {
        assert.equal(intervals.length, 400, name);
        assert.equal(mostAtOnce(intervals), 1, `two holders of ${name} at once`);
        if (context.fencing) assertTokensFollowGrants(intervals);
      }
    });

    it('is all or nothing within one waitTimeoutMs, and collapses duplicates', async () => {
      const [x, y] = [newKey(), newKey()];
      const [a, b] = [await client(), await client()];
      const busy = await a.acquire(y);
      const started = performance.now();
      await assert.rejects(b.acquire([x, y, x], { waitTimeoutMs: 200 }), LockTimeoutError);
      assert.ok(performance.now() - started < 2_000, 'the wait overran its budget');
      const free = await a.tryAcquire(x);
      assert.ok(free, 'a name of a failed call on several stayed held');
      await free.release();
      await busy.release();
      const both = await b.acquire([x, y, x]);
      assert.deepEqual([...both.fencingTokens.keys()].sort(), [x, y].sort());
      assert.deepEqual([...both.names].sort(), [x, y].sort());
      assert.equal(await a.tryAcquire([y, x]), null);
      await both.release();
      const again = await a.tryAcquire([y, x]);
      assert.ok(again, 'tryAcquire of two free names failed');
      await again.release();
    });

    it('fires the lost signal when any of the names is lost, and re-enters each name', async () => {
      const [x, y] = [newKey(), newKey()];
      const service = await client();
      await service.withLock(
        [x, y],
        async (lock) => {
          const inner = await service.acquire(y);
          assert.equal(inner.reentrant, true);
          await inner.release();
          assert.equal(lock.isHeld, true);
          await service.forceRelease(x);
          await assert.rejects(lock.extend(), Error);
          assert.equal(lock.signal.aborted, true);
        },
        { onLockLost: 'ignore' },
      );
    });

    it('rejects an empty list with LockKeyError before any I/O', async () => {
      const { backend, calls } = countingBackend(await context.newBackend());
      const service = await client(backend);
      await assert.rejects(service.acquire([]), LockKeyError);
      await assert.rejects(service.withLock([], () => undefined), LockKeyError);
      await assert.rejects(service.acquire(['ok', '']), LockKeyError);
      assert.deepEqual(calls, NO_CALLS);
    });
  });
}
