import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { Etcd3 } from 'etcd3';
import { DEFAULT_KEY_PREFIX, DistributedLockError, LockBackendError, type LockGrant } from '../../../lib';
import { contenderRange, lockKeys } from '../../../lib/backends/etcd/etcd-keys';
import { deleteOwnTxn } from '../../../lib/backends/etcd/etcd-requests';
import { HolderProcess } from '../../support/holder-process';
import { lockServiceOver } from '../../support/lock-service-factory';
import { abortedWithin, FAULT_SUITE_TIMEOUT_MS, sleep } from '../../support/timing';
import { etcdFixture, request, timerLateness, txnKind, within } from './etcd-test-kit';

describe('etcd backend', { timeout: FAULT_SUITE_TIMEOUT_MS }, () => {
  const etcd = etcdFixture();
  let seq = 0;
  const newKey = () => `etcd-test-${process.pid}-${++seq}`;


  it('takes a free lock in one transaction and releases it in one, two writes in all', async () => {
    const client = new Etcd3({ hosts: etcd.cluster.hosts });
    try {
      const txns: string[] = [];
      const txn = client.kv.txn.bind(client.kv);
      client.kv.txn = (req, options) => {
        txns.push(txnKind(req));
        return txn(req, options);
      };
      const locks = etcd.backend({ client });
      await locks.release((await locks.acquire(request(newKey(), 'warm-up')))!);
      txns.length = 0;
      const revisionBefore = BigInt((await etcd.admin.kv.range({ key: Buffer.from('x') })).header.revision);
      const grant = await locks.acquire(request(newKey(), 'o1'));
      assert.deepEqual(txns, ['put'], 'an uncontended acquire took more than one transaction');
      await locks.release(grant);
      assert.deepEqual(txns, ['put', 'delete']);
      const revisionAfter = BigInt((await etcd.admin.kv.range({ key: Buffer.from('x') })).header.revision);
      assert.equal(revisionAfter - revisionBefore, 2n);
      assert.equal(grant.fencingToken, (revisionBefore + 1n) << 16n, 'the fencing token is not the key create revision, shifted for the turns');
      await locks.close();
    } finally {
      client.close();
    }
  });

  it('a retried release (an older create revision of the same key) never deletes the newer lock', async () => {
    const keys = lockKeys(newKey(), '1', 'owner');
    await etcd.admin.put(keys.own).value('');
    const older = BigInt((await etcd.admin.get(keys.own).exec()).kvs[0].create_revision);
    await etcd.admin.kv.txn(deleteOwnTxn(keys, older));
    await etcd.admin.put(keys.own).value('');
    // The first delete's answer was lost; the retry arrives after the key was created again.
    await etcd.admin.kv.txn(deleteOwnTxn(keys, older));
    assert.equal((await etcd.admin.get(keys.own).exec()).kvs.length, 1, 'the retried release deleted the newer key');

    // Through the backend: a stale grant of a reused owner id releases nothing.
    const key = newKey();
    const [a, b] = [etcd.backend(), etcd.backend()];
    const first = await a.acquire(request(key, 'reused'));
    await a.release(first);
    const second = await a.acquire(request(key, 'reused'));
    assert.ok(second.fencingToken > first.fencingToken);
    await a.release(first);
    assert.equal(await b.tryAcquire(request(key, 'other')), null, 'releasing the stale grant freed the newer lock');
    await a.release(second);
    assert.ok(await b.tryAcquire(request(key, 'other')));
  });

  it("reuses a process's key names under a busy lock name, so etcd's index of the name (deleted keys stay in it until compaction) stays as small as the entries in flight", async () => {
    const key = newKey();
    const locks = etcd.backend();
    const { start, end } = contenderRange(key);
    const names = new Set<string>();
    const holderKey = async () => {
      const response = await etcd.admin.kv.range({ key: start, range_end: end, keys_only: true });
      for (const kv of response.kvs) names.add(kv.key.toString());
    };
    for (let round = 0; round < 20; round++) {
      // One caller, then a burst of callers of one process served under one entry.
      await locks.release(await locks.acquire(request(key, `alone-${round}`)).then(async (grant) => (await holderKey(), grant)));
      const burst = Array.from({ length: 4 }, (_, i) => locks.acquire(request(key, `burst-${round}-${i}`)).then(async (grant) => (await holderKey(), locks.release(grant))));
      await within(Promise.all(burst), 20_000, `burst ${round}`);
    }
    const history = await etcd.admin.kv.range({ key: start, range_end: end, keys_only: true });
    assert.equal(history.kvs.length, 0, 'keys left under the name after every release');
    assert.ok(names.size <= 2, `40 entries of one process used ${names.size} key names, such as ${[...names].slice(0, 3).join(', ')}`);
  });

  it('serves the callers of one process that arrive together under one key: one put, one delete, hand-overs with no round trip, no other process in between', async () => {
    const key = newKey();
    const client = etcd.client();
    const txns: string[] = [];
    const txn = client.kv.txn.bind(client.kv);
    client.kv.txn = (req, options) => {
      txns.push(txnKind(req));
      return txn(req, options);
    };
    const here = etcd.backend({ client });
    const elsewhere = etcd.backend(); // another session: what another process would be
    await here.release((await here.acquire(request(newKey(), 'warm-up')))!);
    txns.length = 0;
    const callers = Array.from({ length: 20 }, (_, i) => here.acquire(request(key, `here-${i}`)));
    const first = await within(callers[0], 5_000, 'the first caller');
    let otherGranted = false;
    const other = elsewhere.acquire(request(key, 'other-process')).then((grant) => ((otherGranted = true), grant));
    await sleep(100);
    etcd.cluster.pause(0);
    const grants = [first];
    try {
      // etcd answers nothing now, yet each release hands the lock to the next caller at once:
      // the key stays the lowest, and the token grows with each turn.
      for (let i = 1; i < callers.length; i++) {
        void here.release(grants[i - 1], 20_000);
        grants.push(await within(callers[i], 500, `caller ${i} while etcd is paused`));
        assert.ok(grants[i].fencingToken > grants[i - 1].fencingToken, 'the token did not increase at the hand-over');
      }
      assert.equal(otherGranted, false);
    } finally {
      etcd.cluster.resume(0);
    }
    await here.release(grants.at(-1)!, 20_000);
    const otherGrant = await within(other, 5_000, 'the other process after the batch');
    assert.ok(otherGrant.fencingToken > grants.at(-1)!.fencingToken);
    assert.deepEqual(txns, ['put', 'delete'], `20 callers of one process cost ${txns.join(', ')}`);
    await elsewhere.release(otherGrant);
  });

  it('confirms with etcd before serving the next caller when the holder\'s lease is not known valid', async () => {
    const key = newKey();
    const here = etcd.backend();
    const first = here.acquire(request(key, 'holder'));
    let nextGranted = false;
    const next = here.acquire(request(key, 'next-here')).then((grant) => ((nextGranted = true), grant));
    const holder = await within(first, 5_000, 'the holder');
    etcd.cluster.pause(0);
    try {
      // What the service does when the holder's lease ran out (no quorum, say): release with no validity.
      await here.release(holder);
      await sleep(500);
      assert.equal(nextGranted, false, 'a caller was handed the lock of a holder whose lease was lost, unconfirmed');
      etcd.cluster.resume(0);
      const nextGrant = await within(next, 5_000, 'the next caller once etcd confirms');
      assert.ok(nextGrant.fencingToken > holder.fencingToken);
      await here.release(nextGrant);
    } finally {
      etcd.cluster.resume(0);
    }
  });

  it('never grants the callers still queued under a key that etcd no longer has: they queue again, with a key of their own', async () => {
    const key = newKey();
    const here = etcd.backend();
    const first = here.acquire(request(key, 'holder'));
    const next = here.acquire(request(key, 'next-here'));
    let nextSettled = false;
    void next.then(() => (nextSettled = true), () => (nextSettled = true));
    const holder = await within(first, 5_000, 'the holder');
    // The key goes behind the process's back (as an operator's forced release does).
    await etcd.admin.delete().prefix(`${key}/`);
    await sleep(100);
    assert.equal(nextSettled, false, 'the next caller was served under the deleted key');
    assert.equal(await here.renew(holder), false);
    const granted = await within(next, 5_000, 'the next caller');
    const [newKeyValue, ...others] = (await etcd.admin.getAll().prefix(`${key}/`).exec()).kvs;
    assert.deepEqual(others, []);
    // The first turn under the new key, above the holder's token.
    assert.equal(granted.fencingToken, BigInt(newKeyValue.create_revision) << 16n);
    assert.ok(granted.fencingToken > holder.fencingToken);
    await here.release(holder);
    assert.equal(await here.renew(granted), true, "the lost holder's release ended the next one's lock");
    await here.release(granted);
  });

  // The waiter arrives with the holder (one batch, one key) or after it (a key of its own).
  for (const arrival of ['with the holder', 'after the holder'] as const) {
    it(`grants no waiter of the process on shutdown, while the held locks are released (waiter ${arrival})`, async () => {
      const key = newKey();
      const service = lockServiceOver(etcd.backend());
      const elsewhere = etcd.backend();
      // A short lease: shutdown waits for a holder to release, or for its lease to run out.
      const first = service.acquire(key, { ttlMs: 1_000 });
      if (arrival === 'after the holder') await first;
      const sameProcess = service.acquire(key, { waitTimeoutMs: 10_000 }).then(
        () => 'granted',
        (error: unknown) => error,
      );
      const held = await first;
      await sleep(100);
      const other = elsewhere.acquire(request(`${DEFAULT_KEY_PREFIX}${key}`, 'other-process'));
      await sleep(100);
      await service.onApplicationShutdown();
      assert.equal(held.signal.aborted, true);
      const outcome = await sameProcess;
      assert.ok(outcome instanceof DistributedLockError, `a waiter of the closing service got ${String(outcome)}`);
      // The closed service's keys are gone: another process gets the lock at once.
      await elsewhere.release(await within(other, 5_000, 'another process after the shutdown'));
    });
  }

  it('keeps lock names apart: "n", "n/x" and "n%2Fx" never share a queue', async () => {
    const key = newKey();
    const [a, b] = [etcd.backend(), etcd.backend()];
    const held = [await a.tryAcquire(request(key, 'a1')), await a.tryAcquire(request(`${key}/x`, 'a2'))];
    assert.ok(held.every(Boolean), 'a name and its "/" extension blocked each other');
    assert.ok(await b.tryAcquire(request(`${key}%2Fx`, 'b1')), '"%2F" collided with "/"');
    assert.equal(await b.tryAcquire(request(`${key}/x`, 'b2')), null);
  });

  // Across processes a waiter watches its predecessor; within one it is told by the process,
  // and must switch to a watch when its local predecessor leaves and a remote one is next.
  const layouts = {
    'four processes': () => [etcd.backend(), etcd.backend(), etcd.backend(), etcd.backend()],
    'holder in one process, waiters in another': () => {
      const waiters = etcd.backend();
      return [etcd.backend(), waiters, waiters, waiters];
    },
    'one process': () => {
      const shared = etcd.backend();
      return [shared, shared, shared, shared];
    },
  };
  for (const [layout, clients] of Object.entries(layouts)) {
    it(`moves the queue on when waiters in the middle give up (${layout})`, async () => {
      const key = newKey();
      const [a, b, c, d] = clients();
      const holder = await a.acquire(request(key, 'h'));
      const leaving1 = new AbortController();
      const leaving2 = new AbortController();
      const first = b.acquire(request(key, 'w1', leaving1.signal));
      await sleep(30);
      const second = c.acquire(request(key, 'w2', leaving2.signal));
      await sleep(30);
      const third = d.acquire(request(key, 'w3'));
      await sleep(30);
      // w3 waits on w2, w2 on w1: both leave, so w3 must find the holder as its predecessor.
      leaving2.abort(new Error('w2 gave up'));
      leaving1.abort(new Error('w1 gave up'));
      await assert.rejects(first, /w1 gave up/);
      await assert.rejects(second, /w2 gave up/);
      await sleep(50);
      let granted = false;
      void third.then(() => (granted = true));
      await sleep(50);
      assert.equal(granted, false, 'the last waiter got the lock while it was held');
      const started = Date.now();
      await a.release(holder);
      const grant = await within(third, 5_000, 'the last waiter');
      assert.ok(Date.now() - started < 1_000, `the last waiter got the lock ${Date.now() - started} ms after the release`);
      assert.ok(grant.fencingToken > holder.fencingToken);
    });
  }

  it('on session loss fires every lock of the session, fails its waiters, and opens a new session after', async () => {
    const [locks, other] = [etcd.backend({ sessionTtlMs: 3_000 }), etcd.backend()];
    const [k1, k2, k3] = [newKey(), newKey(), newKey()];
    const held = [(await locks.tryAcquire(request(k1, 'a')))!, (await locks.tryAcquire(request(k2, 'b')))!];
    const blocker = (await other.tryAcquire(request(k3, 'c')))!;
    const waiting = locks.acquire(request(k3, 'w'));
    const settled = waiting.then(
      () => 'granted',
      (error: unknown) => error,
    );
    await sleep(50);
    const lease = await etcd.leaseOf(k1);
    const lateness = timerLateness();
    await etcd.admin.leaseClient.leaseRevoke({ ID: lease });
    const revoked = Date.now();
    await abortedWithin(held[0].lost, 5_000);
    const noticedMs = Date.now() - revoked;
    const lateMs = lateness.stop();
    // Noticed at the next keepalive answer: keepalives go every ttl / 3 = 1 s; 300 ms for its
    // round trip, plus how late this process's timers ran (measured, up to ~400 ms under load).
    assert.ok(noticedMs <= 1_000 + 300 + lateMs, `the revoke was noticed ${noticedMs} ms after it (timers up to ${lateMs} ms late)`);
    assert.equal(held[1].lost.aborted, true, 'one lock of the lost session stayed held');
    const outcome = await settled;
    assert.ok(outcome instanceof LockBackendError, `the waiter of a lost session got ${String(outcome)}`);
    await other.release(blocker);
    assert.equal(await locks.renew(held[0]), false);
    const again = await locks.tryAcquire(request(k1, 'a2'));
    assert.ok(again, 'no new session after the loss');
    assert.notEqual(await etcd.leaseOf(k1), lease);
    console.log(`session revoke noticed after ${noticedMs} ms`);
  });

  it("fires the locks' signals by the session deadline when etcd stops answering", async () => {
    const locks = etcd.backend({ sessionTtlMs: 2_000 });
    const grant = (await locks.tryAcquire(request(newKey(), 'p')))!;
    await sleep(800);
    const lateness = timerLateness();
    etcd.cluster.pause(0);
    const paused = Date.now();
    try {
      // The last keepalive answered was sent before the pause: the session's deadline is at most
      // its ttl after the pause, and its timer fires at most as late as this process's timers ran.
      await abortedWithin(grant.lost, 5_000);
      const firedMs = Date.now() - paused;
      const lateMs = lateness.stop();
      assert.ok(firedMs <= 2_000 + 100 + lateMs, `lost fired ${firedMs} ms after etcd stopped, past the 2 s session (timers up to ${lateMs} ms late)`);
      console.log(`session deadline fired ${firedMs} ms after etcd stopped answering (timers up to ${lateMs} ms late)`);
    } finally {
      etcd.cluster.resume(0);
    }
    await etcd.cluster.waitHealthy(10_000);
  });

  it('hands a SIGKILLed holder\'s lock to a waiter within ttlMs, rounded up to whole seconds, plus 1.5 s (the session follows the module\'s ttlMs)', async () => {
    const ttlMs = 1_500;
    const sessionMs = 2_000; // ttlMs rounded up to whole seconds: the session lease
    const key = newKey();
    const holder = await HolderProcess.start('etcd', { hosts: etcd.cluster.hosts.join(',') }, ttlMs);
    try {
      const token = await holder.acquire(key);
      // The holder's LockService adds the module's default key prefix.
      const waiting: Promise<LockGrant> = etcd.backend().acquire(request(`${DEFAULT_KEY_PREFIX}${key}`, 'next'));
      await sleep(100);
      let granted = false;
      void waiting.then(() => (granted = true));
      await sleep(100);
      assert.equal(granted, false, 'the waiter got the lock while the holder held it');
      holder.kill('SIGKILL');
      const killed = Date.now();
      const grant = await within(waiting, sessionMs + 5_000, 'the waiter behind the killed holder');
      const waitedMs = Date.now() - killed;
      assert.ok(grant.fencingToken > token);
      // etcd checks lease expiry every 500 ms; then the revoke commits and the watch fires.
      const boundMs = sessionMs + 1_500;
      console.log(`SIGKILLed holder (ttlMs ${ttlMs}, session ${sessionMs} ms): lock handed on ${waitedMs} ms after the kill (bound ${boundMs} ms)`);
      assert.ok(waitedMs <= boundMs, `the waiter got the lock ${waitedMs} ms after the kill, bound ${boundMs} ms`);
    } finally {
      await holder.stop();
    }
  });
});
