import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { setFlagsFromString } from 'node:v8';
import { runInNewContext } from 'node:vm';
import { LocalQueueBackend, LockConfigError, MemoryLockBackend, MemoryLockStore, type LockGrant } from '../../../lib';
import { lockServiceOver } from '../../support/lock-service-factory';

const request = (owner: string, signal = new AbortController().signal) => ({ key: 'k', owner, ttlMs: 30_000, signal });
const read = (owner: string, ttlMs = 30_000) => ({ ...request(owner), mode: 'read' as const, ttlMs });
const permit = (owner: string, limit = 2) => ({ ...request(owner), mode: 'permit' as const, limit });
const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

describe('memory backend', () => {
  it('is a driver on the exported LocalQueueBackend, as a custom backend would be', () => {
    assert.ok(new MemoryLockBackend() instanceof LocalQueueBackend);
  });

  it('keeps FIFO order across queue compaction with 5000 waiters, some of whom gave up', async () => {
    const backend = new MemoryLockBackend();
    let current = await backend.acquire(request('holder'));
    const order: number[] = [];
    const waiters: Promise<void>[] = [];
    for (let i = 0; i < 5_000; i++) {
      const controller = new AbortController();
      const waiter = backend.acquire(request(`w${i}`, controller.signal)).then(
        (grant) => {
          order.push(i);
          current = grant;
        },
        () => undefined,
      );
      if (i % 7 === 3) controller.abort(new Error('gave up'));
      waiters.push(waiter);
    }
    const expected = Array.from({ length: 5_000 }, (_, i) => i).filter((i) => i % 7 !== 3);
    for (let handed = 0; handed <= expected.length; handed++) {
      const holder: LockGrant = current;
      await backend.release(holder);
      await Promise.resolve();
    }
    await Promise.all(waiters);
    assert.deepEqual(order, expected);
    await backend.close();
  });

  it('close() rejects its own waiters and frees its locks for the other clients of the store', async () => {
    const store = new MemoryLockStore();
    const closing = new MemoryLockBackend(store);
    const other = new MemoryLockBackend(store);
    await closing.acquire({ ...request('a'), key: 'held' });
    const holder = await other.acquire({ ...request('b'), key: 'busy' });
    const waiting = closing.acquire({ ...request('c'), key: 'busy' });
    await closing.close();
    await assert.rejects(waiting, /closed while waiting/);
    assert.ok(await other.tryAcquire({ key: 'held', owner: 'd', ttlMs: 1_000 }), 'a closed client kept its lock');
    await other.release(holder);
    assert.ok(await other.tryAcquire({ key: 'busy', owner: 'e', ttlMs: 1_000 }), 'the rejected waiter was handed the lock');
    await assert.rejects(closing.acquire(request('f')), /closed/);
    await other.close();
  });

  it('fires the lost signal of a lease that expired and keeps the fence counter after the key is freed', async () => {
    const backend = new MemoryLockBackend();
    const first = await backend.acquire({ ...request('a'), ttlMs: 20 });
    await new Promise((resolve) => setTimeout(resolve, 60));
    assert.equal(first.lost.aborted, true);
    assert.equal(await backend.renew(first, 1_000), false);
    const second = await backend.acquire(request('b'));
    // Tokens are batch tokens, (entry token << 16) + turn: the next entry's token is the store's next fence.
    assert.equal(second.fencingToken >> 16n, (first.fencingToken >> 16n) + 1n);
    assert.ok(second.fencingToken > first.fencingToken);
    await backend.close();
  });

  it('serves the readers of one client under one entry, and each permit caller under an entry of its own', async () => {
    const store = new MemoryLockStore();
    const [a, b] = [new MemoryLockBackend(store), new MemoryLockBackend(store)];
    const readers = await Promise.all([a.acquire(read('r1')), a.acquire(read('r2')), b.acquire(read('r3'))]);
    const view = await a.inspect('k');
    assert.equal(view.mode, 'read');
    assert.equal(view.holders?.length, 2, 'one entry per client');
    for (const grant of readers) await (readers.indexOf(grant) < 2 ? a : b).release(grant);
    assert.equal((await a.inspect('k')).held, false);

    const permits = [a.acquire(permit('p1')), a.acquire(permit('p2')), a.acquire(permit('p3'))];
    const [p1, p2] = await Promise.all(permits.slice(0, 2));
    const full = await a.inspect('k');
    assert.equal(full.holders?.length, 2);
    assert.equal(full.waiting, 1);
    await a.release(p1);
    const p3 = await permits[2];
    assert.ok(p3.fencingToken > p2.fencingToken);
    await assert.rejects(b.acquire(permit('p4', 3)), (error: unknown) => error instanceof LockConfigError && /limit 2/.test(error.message) && /limit 3/.test(error.message));
    await a.close();
    await b.close();
  });

  it("keeps a read entry's lease at the longest any of its holders was given", async () => {
    const backend = new MemoryLockBackend();
    const [long, short] = await Promise.all([backend.acquire(read('long', 1_000)), backend.acquire(read('short', 1_000))]);
    assert.equal(await backend.renew(short, 40), true);
    await sleep(80);
    assert.equal(long.lost.aborted, false, 'a renewal for one reader shortened the lease of another');
    assert.equal(await backend.renew(long, 1_000), true);
    await backend.release(short);
    await backend.release(long);
    assert.equal((await backend.inspect('k')).held, false);
    await backend.close();
  });

  it('a lost entry loses every holder of its batch, and its waiting callers put a new entry', async () => {
    const backend = new MemoryLockBackend();
    const readers = await Promise.all([backend.acquire(read('r1', 30)), backend.acquire(read('r2', 30))]);
    await sleep(80);
    assert.deepEqual(readers.map((grant) => grant.lost.aborted), [true, true]);
    assert.equal(await backend.renew(readers[1], 1_000), false);

    const holder = await backend.acquire({ ...request('w1'), ttlMs: 30 });
    // Asked in the holder's tick: it waits in the holder's batch, under the entry about to be lost.
    const next = backend.acquire(request('w2'));
    await sleep(80);
    assert.equal(holder.lost.aborted, true);
    const granted = await next;
    assert.ok(granted.fencingToken >> 16n > holder.fencingToken >> 16n, 'the waiter was served under the lost entry');
    assert.equal((await backend.inspect('k')).holder?.fencingToken, granted.fencingToken);
    assert.equal(await backend.forceRelease('k'), true);
    assert.equal(granted.lost.aborted, true, 'a forced release is told at once');
    await backend.release(granted);
    await backend.close();
  });

  it('keeps nothing of the cycles it finished in a loop of awaits, which lets no tick run until it ends', async () => {
    setFlagsFromString('--expose-gc');
    const collectGarbage = runInNewContext('gc') as () => void;
    const service = lockServiceOver(new MemoryLockBackend());
    const cycles = 20_000;
    const loop = async () => {
      for (let i = 0; i < cycles; i++) await service.withLock('loop', () => undefined);
    };
    await loop();
    collectGarbage();
    const before = process.memoryUsage().heapUsed;
    await loop();
    // Measured before this chain of microtasks yields: nothing queued for a later tick has run.
    collectGarbage();
    const retainedPerCycle = (process.memoryUsage().heapUsed - before) / cycles;
    // A cycle's request, batch and grant take about 1.9 KB; what is left is measurement noise.
    assert.ok(retainedPerCycle < 200, `${cycles} cycles kept ${Math.round(retainedPerCycle)} bytes each`);
    await service.onApplicationShutdown();
  });
});
