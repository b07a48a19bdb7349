import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { MemoryLockBackend, MemoryLockStore, type LockGrant } from '../../../lib';

const request = (owner: string, signal = new AbortController().signal) => ({ key: 'k', owner, ttlMs: 30_000, signal });

describe('memory backend', () => {
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
    assert.equal(second.fencingToken, first.fencingToken + 1n);
    await backend.close();
  });
});
