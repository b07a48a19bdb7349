import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { LockConfigError } from '../../../lib';
import type { AcquireRequest, EntryMode, LockBackend, LockGrant } from '../../../lib/backends/lock-backend.interface';
import { createBackend } from '../../../lib/backends/registry';
import { TcpProxy } from '../../support/tcp-proxy';
import { abortedWithin, eventually, sleep, mostAtOnce } from '../../support/timing';
import { etcdFixture, txnKind, within } from './etcd-test-kit';

/** One grant's hold, as the test saw it: from the grant's arrival to just before its release was sent. */
interface Hold {
  readonly mode: EntryMode;
  readonly owner: string;
  readonly token: bigint;
  readonly start: number;
  readonly end: number;
}

/**
 * Read locks and semaphores on etcd, against a real server, with several backends standing for
 * several processes, called directly (no LockService): readers share, a writer is alone, a
 * reader behind a queued writer waits for it, a semaphore never passes its limit and reaches it,
 * a cut-off holder's permit comes back within the session ttl, tokens follow the grant order.
 */
describe('etcd backend: read locks and semaphores', () => {
  const etcd = etcdFixture();
  let seq = 0;
  let owners = 0;
  const newKey = () => `etcd-modes-${process.pid}-${++seq}`;
  const newOwner = (label: string) => `${label}-${++owners}`;

  /** A backend as a process would have it (the registry's), closed after the test. */
  async function processClient(settings?: { ttlMs: number }, host?: string): Promise<LockBackend> {
    const backend = await createBackend({ type: 'etcd', hosts: host ?? etcd.cluster.hosts }, { ttlMs: settings?.ttlMs ?? 30_000, serverTimeoutMs: 5_000 });
    etcd.backends.push(backend);
    return backend;
  }

  function ask(key: string, owner: string, mode: EntryMode, limit?: number, signal = new AbortController().signal): AcquireRequest {
    return { key, owner, ttlMs: 30_000, signal, mode, limit };
  }

  /** Acquires, holds `holdMs`, releases; records the hold. */
  async function hold(backend: LockBackend, key: string, mode: EntryMode, holdMs: number, holds: Hold[], limit?: number): Promise<void> {
    const owner = newOwner(mode);
    const grant = await within(backend.acquire(ask(key, owner, mode, limit)), 20_000, `${mode} ${owner}`);
    const start = performance.now();
    await sleep(holdMs);
    holds.push({ mode, owner, token: grant.fencingToken, start, end: performance.now() });
    await backend.release(grant);
  }


  /** Tokens are unique, and a hold that ended before another began has the lower token. */
  function assertTokensFollowGrants(holds: readonly Hold[]): void {
    assert.equal(new Set(holds.map((h) => h.token)).size, holds.length, 'two grants got the same token');
    for (const a of holds) {
      for (const b of holds) {
        if (a.end <= b.start) assert.ok(a.token < b.token, `${a.owner} (token ${a.token}) ended before ${b.owner} began, yet ${b.owner} has token ${b.token}`);
      }
    }
  }

  it('readers of three processes hold together, a writer holds alone, and tokens follow the grant order', async () => {
    const clients = await Promise.all([processClient(), processClient(), processClient()]);
    const key = newKey();
    const holds: Hold[] = [];
    const plan: EntryMode[][] = [
      ['read', 'write', 'read', 'read'],
      ['read', 'read', 'write', 'read'],
      ['read', 'read', 'read', 'write'],
    ];
    await Promise.all(
      clients.map(async (backend, i) => {
        // Each process's calls overlap too: they are sent a few ms apart, not one after the other.
        await Promise.all(plan[i].map(async (mode, j) => {
          await sleep(j * 15);
          await hold(backend, key, mode, 80, holds);
        }));
      }),
    );
    const writes = holds.filter((h) => h.mode === 'write');
    for (const w of writes) {
      const overlapping = holds.filter((h) => h !== w && h.start < w.end && w.start < h.end);
      assert.deepEqual(overlapping.map((h) => h.owner), [], `writer ${w.owner} overlapped`);
    }
    const reads = holds.filter((h) => h.mode === 'read');
    assert.ok(mostAtOnce(reads) >= 2, `readers never held together (at most ${mostAtOnce(reads)} at once)`);
    assertTokensFollowGrants(holds);
    assert.deepEqual(await clients[0].inspect!(key), { held: false, waiting: 0 });
  });

  it('a reader that comes after a queued writer is granted after that writer', async () => {
    const [a, b, c] = await Promise.all([processClient(), processClient(), processClient()]);
    const key = newKey();
    const first = await a.acquire(ask(key, 'reader-1', 'read'));
    const order: string[] = [];
    const writer = b.acquire(ask(key, 'writer', 'write')).then((grant) => (order.push('writer'), grant));
    await eventually(async () => (await a.inspect!(key)).waiting === 1, 5_000, 'the writer queued');
    const second = c.acquire(ask(key, 'reader-2', 'read')).then((grant) => (order.push('reader-2'), grant));
    await eventually(async () => (await a.inspect!(key)).waiting === 2, 5_000, 'the second reader queued');
    await sleep(200);
    assert.deepEqual(order, [], 'someone was granted while the first reader held');
    await a.release(first);
    const writeGrant = await within(writer, 5_000, 'the writer');
    await sleep(200);
    assert.deepEqual(order, ['writer'], 'the second reader did not wait for the writer');
    await b.release(writeGrant);
    const readGrant = await within(second, 5_000, 'the second reader');
    assert.ok(first.fencingToken < writeGrant.fencingToken && writeGrant.fencingToken < readGrant.fencingToken, 'tokens out of grant order');
    await c.release(readGrant);
  });

  it('readers of one process share one entry and hold together, and permits of one process each take a place', async () => {
    const backend = await processClient();
    const [readKey, permitKey] = [newKey(), newKey()];
    const reads = await within(Promise.all([1, 2, 3, 4, 5].map((i) => backend.acquire(ask(readKey, `r${i}`, 'read')))), 5_000, 'five readers');
    assert.deepEqual(await backend.inspect!(readKey).then((seen) => [seen.holders?.length, seen.waiting]), [1, 0], 'the readers did not share one entry');
    assert.equal(new Set(reads.map((grant) => grant.fencingToken)).size, 5, 'two readers got the same token');
    const permits = [1, 2, 3, 4, 5].map((i) => backend.acquire(ask(permitKey, `p${i}`, 'permit', 4)));
    const granted: LockGrant[] = [];
    for (const permit of permits) void permit.then((grant) => granted.push(grant));
    await eventually(() => granted.length === 4, 5_000, 'four permits of one process');
    await sleep(200);
    assert.equal(granted.length, 4, 'a fifth permit was granted with a limit of 4');
    await backend.release(granted[0]);
    await within(Promise.all(permits), 5_000, 'the fifth permit after a release');
    for (const grant of [...reads, ...(await Promise.all(permits))]) await backend.release(grant);
  });

  it('a semaphore of 3 with 12 callers over 3 processes never has more than 3 holders, and reaches 3', async () => {
    const clients = await Promise.all([processClient(), processClient(), processClient()]);
    const key = newKey();
    const holds: Hold[] = [];
    await Promise.all(clients.flatMap((backend) => [0, 1, 2, 3].map(async (j) => {
      await sleep(j * 10);
      await hold(backend, key, 'permit', 60 + 20 * j, holds, 3);
    })));
    assert.equal(holds.length, 12);
    const most = mostAtOnce(holds);
    assert.ok(most <= 3, `${most} permits held at once with a limit of 3`);
    assert.equal(most, 3, `the semaphore never reached 3 holders (at most ${most})`);
    assertTokensFollowGrants(holds);
  });

  it('a release wakes the first waiting permit, whose grant wakes the one behind it: not every waiter', async () => {
    const key = newKey();
    const holders = await processClient();
    const [p1, p2] = await Promise.all(['p1', 'p2'].map((owner) => holders.acquire(ask(key, owner, 'permit', 2))));
    let reads = 0;
    const waiters: Array<Promise<LockGrant>> = [];
    const granted: string[] = [];
    for (let i = 0; i < 5; i++) {
      // A process of its own per waiter, on a client whose reads are counted.
      const client = etcd.client();
      const txn = client.kv.txn.bind(client.kv);
      client.kv.txn = (request, options) => ((reads += txnKind(request) === 'read' ? 1 : 0), txn(request, options));
      const backend = await createBackend({ type: 'etcd', client }, { ttlMs: 30_000, serverTimeoutMs: 5_000 });
      etcd.backends.push(backend);
      const owner = `w${i}`;
      const waiting = backend.acquire(ask(key, owner, 'permit', 2)).then((grant) => (granted.push(owner), grant));
      // The waiters left at the end are ended by their backends' close.
      waiting.catch(() => undefined);
      waiters.push(waiting);
      await eventually(async () => (await holders.inspect!(key)).waiting === i + 1, 5_000, `waiter ${i} queued`);
    }
    await sleep(300);
    reads = 0;
    await holders.release(p1);
    // Well under the 5 s safety net of a 30 s session: a missed wake-up fails here.
    await within(waiters[0], 2_000, 'the first waiter after a release');
    await sleep(300);
    // The first waiter's wake-up read, and the second's after the first marked its grant.
    assert.ok(reads <= 2, `${reads} reads by waiters after one release`);
    assert.deepEqual(granted, ['w0']);
    // The second waiter, now first, watches every deletion ahead: the other holder's release grants it.
    await holders.release(p2);
    await within(waiters[1], 2_000, 'the second waiter after the next release');
    assert.deepEqual(granted, ['w0', 'w1']);
  });

  it('a waiting permit goes when any holder ahead releases, the newest included, well before the safety net', async () => {
    const [holders, waiter] = await Promise.all([processClient(), processClient()]);
    const key = newKey();
    const p1 = await holders.acquire(ask(key, 'p1', 'permit', 2));
    const p2 = await holders.acquire(ask(key, 'p2', 'permit', 2));
    const waiting = waiter.acquire(ask(key, 'w', 'permit', 2));
    await eventually(async () => (await holders.inspect!(key)).waiting === 1, 5_000, 'the permit queued');
    await holders.release(p2);
    // The safety net of a 30 s session rereads after 5 s: a waiter that watched only the oldest holder would wait for it.
    const grant = await within(waiting, 2_000, 'the permit after the newer holder released');
    await waiter.release(grant);
    await holders.release(p1);
  });

  it("a renewal that finds a shared read key gone ends every reader of it: the others' lost signal fires", async () => {
    const backend = await processClient();
    const key = newKey();
    const [r1, r2] = await within(Promise.all(['shared-1', 'shared-2'].map((owner) => backend.acquire(ask(key, owner, 'read')))), 5_000, 'two readers');
    assert.equal((await backend.inspect!(key)).holders?.length, 1, 'the readers did not share one entry');
    assert.equal(await backend.forceRelease!(key), true);
    assert.equal(await backend.renew(r1, 30_000), false);
    await abortedWithin(r2.lost, 1_000);
    assert.equal(await backend.renew(r2, 30_000), false);
    await backend.release(r1);
    await backend.release(r2);
    assert.deepEqual(await backend.inspect!(key), { held: false, waiting: 0 });
  });

  it("gives a holder's permit back within the session ttl plus 1.5 s when its process is cut off from etcd", async () => {
    const ttlMs = 1_500;
    const sessionMs = 2_000; // ttlMs rounded up to whole seconds: the session lease
    const key = newKey();
    // The doomed process reaches etcd only through a proxy that then drops every byte: to the
    // server it is a crashed process (no release, no revoke, no keepalive).
    const proxy = await TcpProxy.start(Number(new URL(etcd.cluster.hosts[0]).port));
    try {
      const doomed = await processClient({ ttlMs }, `http://${proxy.address}`);
      const other = await processClient();
      const held = await doomed.acquire(ask(key, 'doomed', 'permit', 1));
      const waiting = other.acquire(ask(key, 'next', 'permit', 1));
      await eventually(async () => (await other.inspect!(key)).waiting === 1, 5_000, 'the second permit queued');
      proxy.blackHole();
      const cut = performance.now();
      const grant = await within(waiting, sessionMs + 5_000, 'the permit behind the cut-off holder');
      const waitedMs = Math.round(performance.now() - cut);
      // etcd checks lease expiry every 500 ms; then the delete commits and the watch fires.
      const boundMs = sessionMs + 1_500;
      console.log(`cut-off permit holder (session ${sessionMs} ms): permit handed on ${waitedMs} ms after the cut (bound ${boundMs} ms)`);
      assert.ok(waitedMs <= boundMs, `the permit came back ${waitedMs} ms after the cut, bound ${boundMs} ms`);
      assert.ok(grant.fencingToken > held.fencingToken);
      await other.release(grant);
    } finally {
      await proxy.stop();
    }
  });

  it('an aborted waiter of each mode leaves no entry behind, and the next caller is granted', async () => {
    const [a, b] = await Promise.all([processClient(), processClient()]);
    for (const mode of ['read', 'permit'] as const) {
      const key = newKey();
      const blocker = await a.acquire(ask(key, `blocker-${mode}`, mode === 'read' ? 'write' : 'permit', 1));
      const stop = new AbortController();
      const waiting = b.acquire(ask(key, `aborted-${mode}`, mode, 1, stop.signal));
      await eventually(async () => (await a.inspect!(key)).waiting === 1, 5_000, `the ${mode} waiter queued`);
      stop.abort(new Error('gave up'));
      await assert.rejects(waiting, /gave up/);
      await eventually(async () => (await a.inspect!(key)).waiting === 0, 2_000, `the aborted ${mode} waiter's entry gone`);
      await a.release(blocker);
      assert.deepEqual(await a.inspect!(key), { held: false, waiting: 0 });
      const next = await within(b.acquire(ask(key, `next-${mode}`, 'write')), 2_000, 'the next caller');
      await b.release(next);
    }
  });

  it("fires a read or permit grant's lost signal when its session is lost and on close, and ends the waits", async () => {
    const key = newKey();
    // A 3 s session sends a keepalive every second: the revoke below is heard within about that.
    const lossy = await processClient({ ttlMs: 3_000 });
    const reader = await lossy.acquire(ask(key, 'lossy-reader', 'read'));
    await etcd.admin.leaseClient.leaseRevoke({ ID: await etcd.leaseOf(key) });
    await abortedWithin(reader.lost, 3_000);
    assert.equal(await lossy.renew(reader, 30_000), false);

    const closing = await processClient();
    const permit = await closing.acquire(ask(key, 'closing-permit', 'permit', 1));
    const waiting = closing.acquire(ask(key, 'closing-waiter', 'permit', 1));
    await eventually(async () => (await lossy.inspect!(key)).waiting === 1, 5_000, 'the second permit queued');
    const ended = assert.rejects(within(waiting, 1_000, 'the wait ended by close'), /closed while waiting/);
    await closing.close();
    assert.ok(permit.lost.aborted, 'close did not fire the held permit\'s lost signal');
    await ended;
    assert.deepEqual(await lossy.inspect!(key), { held: false, waiting: 0 });
  });

  it('a wait aborted as the lock frees up leaves nothing held or queued, whichever came first', async () => {
    const [a, b] = await Promise.all([processClient(), processClient()]);
    for (let round = 0; round < 10; round++) {
      const key = newKey();
      const mode = round % 2 === 0 ? 'read' : 'permit';
      const blocker = await a.acquire(ask(key, `blocker-${round}`, mode === 'read' ? 'write' : 'permit', 1));
      const stop = new AbortController();
      const waiting = b.acquire(ask(key, `racer-${round}`, mode, 1, stop.signal)).catch(() => undefined);
      await eventually(async () => (await a.inspect!(key)).waiting === 1, 5_000, `racer ${round} queued`);
      // The abort lands while the wake-up read is in flight, or before it, or after the grant.
      const released = a.release(blocker);
      await sleep(round);
      stop.abort(new Error('gave up'));
      await released;
      const won = await waiting;
      if (won) await b.release(won);
      await eventually(async () => !(await a.inspect!(key)).held, 2_000, `round ${round}: a grant left held`);
      assert.deepEqual(await a.inspect!(key), { held: false, waiting: 0 });
    }
  });

  it('rejects a permit whose limit differs from that of a permit queued or held, naming the key and both limits', async () => {
    const [a, b] = await Promise.all([processClient(), processClient()]);
    const key = newKey();
    const held = await a.acquire(ask(key, 'two', 'permit', 2));
    await assert.rejects(b.acquire(ask(key, 'three', 'permit', 3)), (error: unknown) => {
      assert.ok(error instanceof LockConfigError, String(error));
      assert.equal(error.option, 'limit');
      assert.ok(error.message.includes(key) && /\b2\b/.test(error.message) && /\b3\b/.test(error.message), error.message);
      return true;
    });
    await assert.rejects(b.tryAcquire({ key, owner: 'three-try', ttlMs: 30_000, mode: 'permit', limit: 3 }), LockConfigError);
    // The rejected entries are gone: a permit of the right limit takes the second place.
    const second = await within(b.acquire(ask(key, 'two-b', 'permit', 2)), 2_000, 'a permit of the same limit');
    assert.equal((await a.inspect!(key)).waiting, 0);
    await a.release(held);
    await b.release(second);
  });

  it("inspect shows the holders' mode, limit, owners and tokens; forceRelease removes every holder; renew and release are owner-checked", async () => {
    const [a, b] = await Promise.all([processClient(), processClient()]);
    const readKey = newKey();
    const r1 = await a.acquire(ask(readKey, 'reader-a', 'read'));
    const r2 = await b.acquire(ask(readKey, 'reader-b', 'read'));
    const writer = a.acquire(ask(readKey, 'writer', 'write'));
    await eventually(async () => (await b.inspect!(readKey)).waiting === 1, 5_000, 'the writer queued');
    const seen = await b.inspect!(readKey);
    assert.equal(seen.mode, 'read');
    assert.equal(seen.limit, undefined);
    assert.deepEqual(seen.holders?.map((h) => [h.owner, h.fencingToken]), [['reader-a', r1.fencingToken], ['reader-b', r2.fencingToken]]);
    assert.deepEqual(seen.holder, seen.holders![0]);
    for (const holder of seen.holders!) assert.ok(holder.expiresInMs! > 0 && holder.expiresInMs! <= 30_000, `expiresInMs ${holder.expiresInMs}`);
    assert.equal(await a.renew(r1, 30_000), true);
    assert.equal(await b.renew(r1, 30_000), false, 'another process renewed a grant it does not hold');
    await b.release(r1); // not b's: nothing happens
    assert.equal((await a.inspect!(readKey)).holders?.length, 2);
    assert.equal(await a.forceRelease!(readKey), true);
    const writeGrant = await within(writer, 5_000, 'the writer after forceRelease');
    assert.equal(await a.renew(r1, 30_000), false);
    assert.equal(await b.renew(r2, 30_000), false);
    await a.release(r1);
    await a.release(r1);
    const afterForce = await a.inspect!(readKey);
    assert.equal(afterForce.mode, 'write');
    assert.deepEqual(afterForce.holders?.map((h) => h.fencingToken), [writeGrant.fencingToken]);
    await a.release(writeGrant);

    const permitKey = newKey();
    const p1 = await a.acquire(ask(permitKey, 'p1', 'permit', 2));
    const p2 = await b.acquire(ask(permitKey, 'p2', 'permit', 2));
    const p3 = b.acquire(ask(permitKey, 'p3', 'permit', 2));
    await eventually(async () => (await a.inspect!(permitKey)).waiting === 1, 5_000, 'the third permit queued');
    const semaphore = await a.inspect!(permitKey);
    assert.equal(semaphore.mode, 'permit');
    assert.equal(semaphore.limit, 2);
    assert.deepEqual(semaphore.holders?.map((h) => h.owner), ['p1', 'p2']);
    await a.release(p1);
    const third = await within(p3, 5_000, 'the third permit');
    assert.deepEqual((await a.inspect!(permitKey)).holders?.map((h) => h.owner), ['p2', 'p3']);
    assert.equal(await b.tryAcquire({ key: permitKey, owner: 'p4', ttlMs: 30_000, mode: 'permit', limit: 2 }), null);
    assert.equal((await a.inspect!(permitKey)).waiting, 0, 'a refused try left its entry');
    await b.release(p2);
    const tried = await b.tryAcquire({ key: permitKey, owner: 'p5', ttlMs: 30_000, mode: 'permit', limit: 2 });
    assert.ok(tried, 'a try with a free place was refused');
    await b.release(third);
    await b.release(tried);
  });
});
