import assert from 'node:assert/strict';
import { EventEmitter } from 'node:events';
import { describe, it } from 'node:test';
import type { Etcd3 } from 'etcd3';
import { LockBackendError } from '../../../lib';
import { watchSafetyNetMs } from '../../../lib/backends/etcd/etcd-acquisition';
import { sleep } from '../../support/timing';
import { etcdFixture, request, timerLateness, txnKind, within } from './etcd-test-kit';

/** A watch builder whose watchers never emit anything: a watch stream stuck on a stalled member. */
function silentWatch() {
  const builder = {
    key: () => builder,
    only: () => builder,
    watcher: () => Object.assign(new EventEmitter(), { cancel: async () => undefined }),
  };
  return builder;
}

/** How a waiter waits: only for its predecessor, checked on every wake-up, never stuck. */
describe('etcd backend: waiting in the queue', () => {
  const etcd = etcdFixture();
  let seq = 0;
  const newKey = () => `etcd-wait-${process.pid}-${++seq}`;
  /** A backend on a client of its own whose reads (a woken waiter's rechecks) are counted. */
  const counted = () => {
    const client = etcd.client();
    const txn = client.kv.txn.bind(client.kv);
    const counter = { reads: 0, locks: etcd.backend({ client }) };
    client.kv.txn = (req, options) => {
      if (txnKind(req) === 'read') counter.reads++;
      return txn(req, options);
    };
    return counter;
  };


  it('wakes only the next waiter at each release: no herd', async () => {
    const key = newKey();
    const [first, ...waiters] = Array.from({ length: 5 }, counted);
    let holder = { locks: first.locks, grant: await first.locks.acquire(request(key, 'holder')) };
    const waits = [];
    for (const [i, waiter] of waiters.entries()) {
      waits.push(waiter.locks.acquire(request(key, `w${i}`)));
      await sleep(30);
    }
    await sleep(200); // every watch is set up
    for (const [i, waiter] of waiters.entries()) {
      for (const counter of waiters) counter.reads = 0;
      await holder.locks.release(holder.grant);
      const grant = await within(waits[i], 5_000, `waiter ${i}`);
      await sleep(100); // a waiter woken by this release would have read etcd by now
      const woken = waiters.flatMap((counter, j) => (counter.reads > 0 ? [`w${j}`] : []));
      assert.deepEqual(woken, [`w${i}`], `release ${i + 1} woke ${woken.join(', ')}`);
      holder = { locks: waiter.locks, grant };
    }
    await holder.locks.release(holder.grant);
  });

  it('a waiter whose own key was deleted while it waited gets an error, never the lock', async () => {
    const key = newKey();
    const [holderSide, waiterSide] = [etcd.backend(), etcd.backend()];
    const holder = await holderSide.acquire(request(key, 'holder'));
    const outcome = waiterSide.acquire(request(key, 'waiter')).then(
      () => 'granted',
      (error: unknown) => error,
    );
    await sleep(100);
    // What etcd does to the key of an expired session, done by hand: the waiter is not told.
    const kvs = (await etcd.admin.getAll().prefix(`${key}/`).sort('Create', 'Ascend').exec()).kvs;
    assert.equal(kvs.length, 2);
    await etcd.admin.delete().key(kvs[1].key);
    // The release wakes the waiter: its recheck must find its own key gone.
    await holderSide.release(holder);
    const settled = await within(outcome, 5_000, 'the waiter whose key was deleted');
    assert.ok(settled instanceof LockBackendError, `the waiter whose key was deleted got ${String(settled)}`);
  });

  it('a waiter whose watch never delivers still gets the lock, within the safety-net period', async () => {
    const key = newKey();
    const sessionTtlMs = 2_000;
    const client = etcd.client();
    client.watch = silentWatch as unknown as Etcd3['watch'];
    const [holderSide, waiterSide] = [etcd.backend(), etcd.backend({ client, sessionTtlMs })];
    const holder = await holderSide.acquire(request(key, 'holder'));
    const waiting = waiterSide.acquire(request(key, 'waiter'));
    await sleep(200);
    const lateness = timerLateness();
    const released = Date.now();
    await holderSide.release(holder);
    const grant = await within(waiting, 5_000, 'the waiter whose watch is silent');
    const waitedMs = Date.now() - released;
    const lateMs = lateness.stop();
    assert.ok(grant.fencingToken > holder.fencingToken);
    // A 2 s session looks again every 1 s of silence: one period at most, plus its two reads (the
    // predecessor, then the queue: 300 ms) and how late this process's timers ran.
    const periodMs = watchSafetyNetMs(sessionTtlMs / 1000);
    assert.ok(waitedMs <= periodMs + 300 + lateMs, `the waiter got the lock ${waitedMs} ms after the release (timers up to ${lateMs} ms late)`);
    console.log(`silent watch: lock handed on ${waitedMs} ms after the release (safety net every ${periodMs} ms)`);
    await waiterSide.release(grant);
  });

  it('removes a key whose put committed after its call failed, and wakes the waiter of the process behind it', async () => {
    const key = newKey();
    const client = etcd.client();
    const txn = client.kv.txn.bind(client.kv);
    let latePut: Promise<unknown> | undefined;
    client.kv.txn = (req, options) => {
      if (latePut || txnKind(req) !== 'put') return txn(req, options);
      // The call fails at once, yet etcd commits the put a little later (a proposal in flight).
      latePut = sleep(300).then(() => txn(req, options));
      return Promise.reject(new Error('simulated: the call failed while its put was in flight'));
    };
    const locks = etcd.backend({ client });
    const failedAt = Date.now();
    await assert.rejects(locks.acquire(request(key, 'failed')), /simulated/);
    await latePut;
    assert.equal((await etcd.admin.getAll().prefix(`${key}/`).keys()).length, 1, 'the late put did not leave a key: nothing to test');
    // Queued behind the orphan key, of its own session: no watch, it waits to be told.
    const next = locks.acquire(request(key, 'next'));
    // The key is deleted by name again 9 s after the failure.
    const grant = await within(next, 15_000, 'the waiter behind the key of a failed put');
    const waitedMs = Date.now() - failedAt;
    assert.ok(waitedMs < 9_000 + 2_000, `the orphan key was removed only ${waitedMs} ms after the failure`);
    const left = await etcd.admin.getAll().prefix(`${key}/`).keys();
    assert.deepEqual(left.filter((name) => name.endsWith('/failed')), [], 'the orphan key is still there');
    console.log(`late put: orphan key removed and the next waiter granted ${waitedMs} ms after the failure`);
    await locks.release(grant);
  });
});
