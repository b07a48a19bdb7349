import assert from 'node:assert/strict';
import { fork } from 'node:child_process';
import path from 'node:path';
import { after, before, describe, it } from 'node:test';
import { LockConfigError, LockServerUnreachableError } from '../../../lib/errors';
import type { EntryMode, LockBackend } from '../../../lib/backends/lock-backend.interface';
import { createBackend } from '../../../lib/backends/registry';
import { startRedisServer, type RedisServer } from '../../../servers/redis-server';
import { eventually, mostAtOnce, sleep } from '../../support/timing';
import { WaitRequest } from '../../../lib/wait-request';

const TTL_MS = 5_000;
/** The lease of the holder that dies, short so that the test waits little for it to run out. */
const CRASH_TTL_MS = 1_500;
/**
 * How long after a dead holder's lease ends a waiter is granted (docs/redis.md): the waiter's
 * safety check runs 25 ms after the earliest lease end it was told of, then one round trip,
 * allowed 100 ms for timer lateness on a loaded machine.
 */
const AFTER_LEASE_BOUND_MS = 25 + 100;
const SERVER_TIMEOUT_MS = 1_000;
/** Timer lateness on a loaded 2-core machine, as the write path's failure tests allow. */
const FAILURE_MARGIN_MS = 600;

/** One grant as a test saw it: when it was held, by which mode, with which token. */
interface Hold {
  readonly mode: EntryMode;
  readonly token: bigint;
  readonly start: number;
  end: number;
}

let ownerSeq = 0;
const owner = (label: string) => `${label}-${process.pid}-${++ownerSeq}`;

describe('redis read-write locks and semaphores', () => {
  let redis: RedisServer;
  const clients: LockBackend[] = [];
  const client = async () => {
    const backend = await createBackend({ type: 'redis', url: redis.url });
    clients.push(backend);
    return backend;
  };

  before(async () => {
    redis = await startRedisServer();
  });
  after(async () => {
    await Promise.all(clients.map((backend) => backend.close()));
    await redis?.stop();
  });

  const acquire = (backend: LockBackend, key: string, mode: EntryMode, { limit, signal = new AbortController().signal, ttlMs = TTL_MS }: { limit?: number; signal?: AbortSignal; ttlMs?: number } = {}) =>
    backend.acquire({ key, owner: owner(mode), ttlMs, signal, mode, limit });

  /** Acquires, holds for `holdMs`, releases; the hold is pushed to `holds` when granted. */
  const holdFor = async (backend: LockBackend, key: string, mode: EntryMode, holdMs: number, holds: Hold[], limit?: number) => {
    const grant = await acquire(backend, key, mode, { limit });
    const hold: Hold = { mode, token: grant.fencingToken, start: performance.now(), end: Infinity };
    holds.push(hold);
    await sleep(holdMs);
    hold.end = performance.now();
    await backend.release(grant);
  };

  /** Until the server counts `count` entries queued on `key`. */
  const waitingIs = (backend: LockBackend, key: string, count: number) =>
    eventually(async () => (await backend.inspect!(key)).waiting === count, 5_000, `${count} entries queued on "${key}"`, 10);

  /** Whether the promise is still pending after `ms`. */
  const pendingAfter = async (promise: Promise<unknown>, ms: number) => {
    let settled = false;
    promise.then(
      () => (settled = true),
      () => (settled = true),
    );
    await sleep(ms);
    return !settled;
  };

  /** Most holds at one moment: a hold starts before another's end for each it overlaps. */

  /** A grant released before another was granted has the lower token, whatever their modes; no token twice. */
  const assertTokensFollowGrants = (holds: readonly Hold[]) => {
    assert.equal(new Set(holds.map((hold) => hold.token)).size, holds.length, 'a token was given twice');
    for (const earlier of holds) {
      for (const later of holds) {
        if (earlier.end <= later.start) assert.ok(earlier.token < later.token, `${earlier.mode} ${earlier.token} ended before ${later.mode} ${later.token} began`);
      }
    }
  };

  it('readers of three clients hold at once; a writer overlaps nobody; tokens follow the grants across modes', async () => {
    const backends = [await client(), await client(), await client()];
    const readers: Hold[] = [];
    await Promise.all(backends.map((backend) => holdFor(backend, 'rw', 'read', 200, readers)));
    assert.ok(mostAtOnce(readers) >= 2, `at most ${mostAtOnce(readers)} readers held at once`);

    const holds: Hold[] = [];
    await Promise.all(
      backends.flatMap((backend, i) => [
        (async () => {
          for (let round = 0; round < 4; round++) await holdFor(backend, 'rw', round % 2 === i % 2 ? 'write' : 'read', 20, holds);
        })(),
        (async () => {
          for (let round = 0; round < 4; round++) await holdFor(backend, 'rw', 'read', 15, holds);
        })(),
      ]),
    );
    const writes = holds.filter((hold) => hold.mode === 'write');
    assert.ok(writes.length >= 4);
    for (const write of writes) {
      const overlapping = holds.filter((other) => other !== write && other.start < write.end && write.start < other.end);
      assert.deepEqual(overlapping, [], `the writer with token ${write.token} overlapped others`);
    }
    assert.ok(mostAtOnce(holds.filter((hold) => hold.mode === 'read')) >= 2, 'readers never overlapped in the mixed run');
    assertTokensFollowGrants([...readers, ...holds]);
  });

  it('renewing a shared read entry for a reader with a short ttl never shortens the lease of one with a longer ttl', async () => {
    const backend = await client();
    const [long, short] = await Promise.all([acquire(backend, 'mixed-ttl', 'read', { ttlMs: 10_000 }), acquire(backend, 'mixed-ttl', 'read', { ttlMs: 1_000 })]);
    assert.equal((await backend.inspect!('mixed-ttl')).holders?.length, 1, 'the two readers share one entry');
    assert.equal(await backend.renew(short, 1_000), true);
    const [entry] = (await backend.inspect!('mixed-ttl')).holders!;
    assert.ok(entry.expiresInMs! > 9_000, `the shared entry expires in ${entry.expiresInMs} ms after the short reader's renewal`);
    await backend.release(long);
    assert.equal(await backend.renew(short, 1_000), true);
    assert.ok((await backend.inspect!('mixed-ttl')).holders![0].expiresInMs! <= 1_000, 'the entry kept the long lease of a reader that left');
    await backend.release(short);
    assert.equal((await backend.inspect!('mixed-ttl')).held, false);
  });

  it('readers of one process share one entry, are granted together by a write release, and keep it while any of them holds', async () => {
    const [a, b] = [await client(), await client()];
    const writer = await acquire(a, 'one-process', 'write');
    const readers = [acquire(b, 'one-process', 'read'), acquire(b, 'one-process', 'read'), acquire(b, 'one-process', 'read')];
    assert.ok(await pendingAfter(Promise.race(readers), 100), 'a reader was granted while the writer held');
    assert.equal((await a.inspect!('one-process')).waiting, 1, 'the readers of one process queue behind one entry');
    await a.release(writer);
    const granted = await Promise.all(readers);
    const view = await a.inspect!('one-process');
    assert.equal(view.mode, 'read');
    assert.equal(view.holders?.length, 1);
    assert.equal(view.holder?.fencingToken, granted[0].fencingToken);
    for (let i = 0; i < granted.length; i++) assert.ok(granted[i].fencingToken > (i === 0 ? writer.fencingToken : granted[i - 1].fencingToken), 'tokens do not increase');
    const waiter = a.acquire({ key: 'one-process', owner: owner('write'), ttlMs: TTL_MS, signal: new AbortController().signal });
    await Promise.all(granted.slice(0, 2).map((grant) => b.release(grant)));
    assert.ok(await pendingAfter(waiter, 100), 'a writer was granted while a reader of the shared entry still held');
    assert.equal((await a.inspect!('one-process')).mode, 'read');
    await b.release(granted[2]);
    const written = await waiter;
    assert.ok(written.fencingToken > granted[2].fencingToken);
    await a.release(written);
    assert.equal((await a.inspect!('one-process')).held, false);
  });

  it('a reader that arrives behind a queued writer is granted after that writer', async () => {
    const [a, b, c] = [await client(), await client(), await client()];
    const first = await acquire(a, 'fifo', 'read');
    const writer = acquire(b, 'fifo', 'write');
    await waitingIs(a, 'fifo', 1);
    const late = acquire(c, 'fifo', 'read');
    assert.ok(await pendingAfter(late, 150), 'the late reader went past the queued writer');
    assert.equal(await c.tryAcquire({ key: 'fifo', owner: owner('try'), ttlMs: TTL_MS, mode: 'read' }), null, 'a try went past the queued writer');
    await a.release(first);
    const written = await writer;
    assert.ok(await pendingAfter(late, 100), 'the late reader was granted while the writer held');
    const writeEnd = performance.now();
    await b.release(written);
    const reader = await late;
    const grantedAt = performance.now();
    assert.ok(grantedAt >= writeEnd);
    assert.ok(first.fencingToken < written.fencingToken && written.fencingToken < reader.fencingToken, `tokens ${first.fencingToken}, ${written.fencingToken}, ${reader.fencingToken}`);
    await c.release(reader);
  });

  it('a semaphore of 3 with 12 callers over 3 clients never has more than 3 holders and reaches 3', async () => {
    const backends = [await client(), await client(), await client()];
    const holds: Hold[] = [];
    await Promise.all(Array.from({ length: 12 }, (_, i) => holdFor(backends[i % 3], 'sem3', 'permit', 40, holds, 3)));
    assert.equal(holds.length, 12);
    assert.equal(mostAtOnce(holds), 3);
    assertTokensFollowGrants(holds);
    assert.equal((await backends[0].inspect!('sem3')).held, false);
  });

  it('a semaphore of 4 in one process reaches 4 holders; a try when it is full gets null', async () => {
    const backend = await client();
    const grants = await Promise.all(Array.from({ length: 4 }, () => acquire(backend, 'sem4', 'permit', { limit: 4 })));
    const view = await backend.inspect!('sem4');
    assert.equal(view.mode, 'permit');
    assert.equal(view.limit, 4);
    assert.equal(view.holders?.length, 4);
    assert.equal(await backend.tryAcquire({ key: 'sem4', owner: owner('try'), ttlMs: TTL_MS, mode: 'permit', limit: 4 }), null);
    await backend.release(grants[0]);
    const tried = await backend.tryAcquire({ key: 'sem4', owner: owner('try'), ttlMs: TTL_MS, mode: 'permit', limit: 4 });
    assert.ok(tried && tried.fencingToken > grants[3].fencingToken);
    await Promise.all([...grants.slice(1), tried].map((grant) => backend.release(grant)));
  });

  it('inspect lists every holder with its token and lease; renew extends a lease; forceRelease removes every holder', async () => {
    const [a, b] = [await client(), await client()];
    const readers = [await acquire(a, 'look', 'read', { ttlMs: 2_000 }), await acquire(b, 'look', 'read', { ttlMs: 2_000 })];
    const writer = acquire(b, 'look', 'write');
    await waitingIs(a, 'look', 1);
    const view = await a.inspect!('look');
    assert.equal(view.held, true);
    assert.equal(view.mode, 'read');
    assert.equal(view.limit, undefined);
    // A holder's owner is its entry's id (one entry per batch of a process's readers).
    assert.deepEqual(
      view.holders?.map((holder) => holder.fencingToken),
      readers.map((grant) => grant.fencingToken),
    );
    assert.equal(view.holder?.fencingToken, readers[0].fencingToken);
    for (const holder of view.holders!) assert.ok(holder.expiresInMs! <= 2_000 && holder.expiresInMs! > 1_000 && holder.heldForMs! >= 0, JSON.stringify(holder, (_, v) => (typeof v === 'bigint' ? String(v) : v)));

    assert.equal(await a.renew(readers[0], 10_000), true);
    const renewed = (await a.inspect!('look')).holders!.find((holder) => holder.fencingToken === readers[0].fencingToken)!;
    assert.ok(renewed.expiresInMs! > 9_000, `expires in ${renewed.expiresInMs} ms after a renewal to 10 s`);

    assert.equal(await a.forceRelease!('look'), true);
    const written = await writer;
    assert.equal((await a.inspect!('look')).mode, 'write');
    assert.equal(await a.renew(readers[0], 10_000), false, 'a reader forced out still renewed');
    await Promise.all([a.release(readers[0]), b.release(readers[1])]);
    await b.release(written);
    assert.equal(await a.renew(readers[0], 10_000), false);
    assert.equal(await a.forceRelease!('look'), false);
  });

  it('an aborted waiter leaves no entry behind, and entries it held up are granted', async () => {
    const [a, b, c] = [await client(), await client(), await client()];
    const writer = await acquire(a, 'abort', 'write');
    const stop = new AbortController();
    const reader = acquire(b, 'abort', 'read', { signal: stop.signal });
    await waitingIs(a, 'abort', 1);
    stop.abort(new Error('gave up'));
    await assert.rejects(reader, /gave up/);
    await waitingIs(a, 'abort', 0);
    await a.release(writer);
    const next = await c.tryAcquire({ key: 'abort', owner: owner('next'), ttlMs: TTL_MS, mode: 'permit', limit: 1 });
    assert.ok(next, 'the next caller was not granted');
    await c.release(next);

    // A writer queued behind a reader withdraws: the reader queued behind it goes at once.
    const holding = await acquire(a, 'abort', 'read');
    const stopWriter = new AbortController();
    const queuedWriter = acquire(b, 'abort', 'write', { signal: stopWriter.signal });
    await waitingIs(a, 'abort', 1);
    const behind = acquire(c, 'abort', 'read');
    await waitingIs(a, 'abort', 2);
    stopWriter.abort(new Error('writer gave up'));
    await assert.rejects(queuedWriter, /writer gave up/);
    const granted = await behind;
    assert.equal((await a.inspect!('abort')).holders?.length, 2);
    await Promise.all([a.release(holding), c.release(granted)]);
    assert.deepEqual(await a.inspect!('abort'), { held: false, waiting: 0 });

    // Stopped directly, as LockService stops its requests (no AbortSignal made).
    const gate = await acquire(a, 'abort', 'write');
    const request = new WaitRequest('abort', owner('stopped'), TTL_MS, performance.now(), 'read');
    const stopped = b.acquire(request);
    await waitingIs(a, 'abort', 1);
    request.stop(new Error('stopped'));
    await assert.rejects(stopped, /stopped/);
    await waitingIs(a, 'abort', 0);
    await a.release(gate);

    // An abort that races the grant: whichever the server sees first, nothing is left held or queued.
    for (let round = 0; round < 10; round++) {
      const blocking = await acquire(a, 'race', 'write');
      const stopPermit = new AbortController();
      const racing = acquire(b, 'race', 'permit', { limit: 2, signal: stopPermit.signal }).then(
        (grant) => b.release(grant),
        () => undefined,
      );
      await waitingIs(a, 'race', 1);
      const released = a.release(blocking);
      stopPermit.abort(new Error('raced'));
      await Promise.all([released, racing]);
      await eventually(async () => !(await a.inspect!('race')).held, 2_000, 'the raced grant given back', 10);
      assert.deepEqual(await a.inspect!('race'), { held: false, waiting: 0 }, `round ${round}`);
    }
  });

  it('a permit whose limit differs from a held or queued permit of the name is refused', async () => {
    const [a, b] = [await client(), await client()];
    const held = await acquire(a, 'limits', 'permit', { limit: 2 });
    await assert.rejects(acquire(b, 'limits', 'permit', { limit: 3 }), (error: unknown) => {
      assert.ok(error instanceof LockConfigError && error.option === 'limit', String(error));
      assert.match(error.message, /"limits".*limit 3.*limit 2/);
      return true;
    });
    // The same process: a permit of another limit never shares a batch with it, and is refused alike.
    await assert.rejects(acquire(a, 'limits', 'permit', { limit: 4 }), (error: unknown) => error instanceof LockConfigError && /"limits".*limit 4.*limit 2/.test(error.message));
    await a.release(held);

    const writer = await acquire(a, 'limits', 'write');
    const queued = acquire(b, 'limits', 'permit', { limit: 2 });
    await waitingIs(a, 'limits', 1);
    await assert.rejects(b.tryAcquire({ key: 'limits', owner: owner('try'), ttlMs: TTL_MS, mode: 'permit', limit: 5 }), /limit 5.*limit 2/);
    await a.release(writer);
    await b.release(await queued);
  });

  for (const [mode, waits] of [
    ['permit', 'permit'],
    ['read', 'write'],
] as const) {
    it(`a ${mode} holder killed with SIGKILL lets a waiting ${waits} in within its ttl + ${AFTER_LEASE_BOUND_MS} ms`, async (t) => {
      const key = `crash-${mode}`;
      const child = fork(path.join(__dirname, 'redis-modes-holder.js'), [redis.url, key, String(CRASH_TTL_MS), mode], { stdio: ['ignore', 'inherit', 'inherit', 'ipc'] });
      const renewedAt: number[] = [];
      const granted = new Promise<void>((resolve, reject) => {
        child.on('message', (message: string) => {
          if (message === 'granted') resolve();
          if (message === 'renewed') renewedAt.push(performance.now());
        });
        child.on('exit', () => reject(new Error('the holder exited before its grant')));
      });
      await granted;
      const backend = await client();
      const waiter = acquire(backend, key, waits, { limit: 1 });
      assert.ok(await pendingAfter(waiter, CRASH_TTL_MS), 'granted while the holder was alive and renewing');
      child.kill('SIGKILL');
      const killedAt = performance.now();
      const grant = await waiter;
      const waitedMs = performance.now() - killedAt;
      // A renewal may reach the server just before the kill while its report never reaches us: the
      // lease left at the kill is at most a whole ttl, whatever the last report said.
      const reportedLeftMs = CRASH_TTL_MS - (killedAt - (renewedAt.at(-1) ?? killedAt - CRASH_TTL_MS));
      const boundMs = CRASH_TTL_MS + AFTER_LEASE_BOUND_MS;
      t.diagnostic(
        `granted ${waitedMs.toFixed(0)} ms after the kill; bound ${boundMs} ms (ttl ${CRASH_TTL_MS} + ${AFTER_LEASE_BOUND_MS} ms; ` +
          `the last renewal reported left ${reportedLeftMs.toFixed(0)} ms)`,
      );
      assert.ok(waitedMs <= boundMs, `granted ${waitedMs.toFixed(0)} ms after the kill, bound ${boundMs.toFixed(0)} ms`);
      await backend.release(grant);
    });
  }

  it('close() fires the lost signal of held readers and rejects waiting ones; their entries go', async () => {
    const [a, closing, other] = [await client(), await client(), await client()];
    const [reader, sharing] = await Promise.all([acquire(closing, 'closing', 'read'), acquire(closing, 'closing', 'read')]);
    const writer = acquire(a, 'closing', 'write');
    await waitingIs(a, 'closing', 1);
    const queued = assert.rejects(acquire(other, 'closing', 'read'), /closed while waiting/);
    await waitingIs(a, 'closing', 2);
    await closing.close();
    assert.equal(reader.lost.aborted, true);
    assert.equal(sharing.lost.aborted, true, 'a reader sharing the entry was not told');
    const written = await writer;
    await other.close();
    await queued;
    assert.equal((await a.inspect!('closing')).waiting, 0);
    await a.release(written);
    assert.deepEqual(await a.inspect!('closing'), { held: false, waiting: 0 });
  });

  it(`server paused with SIGSTOP: read and permit acquire, try, renew, release and inspect end by serverTimeoutMs (${SERVER_TIMEOUT_MS} ms)`, async (t) => {
    const paused = await startRedisServer();
    const backend = await createBackend({ type: 'redis', url: paused.url }, { ttlMs: TTL_MS, serverTimeoutMs: SERVER_TIMEOUT_MS });
    try {
      const reader = await acquire(backend, 'paused', 'read');
      const permit = await acquire(backend, 'paused-sem', 'permit', { limit: 2 });
      paused.server.pause();
      const within = async (what: string, call: () => Promise<unknown>, fails = true) => {
        const started = performance.now();
        const outcome = await call().then(
          () => undefined,
          (error: unknown) => error,
        );
        const tookMs = performance.now() - started;
        t.diagnostic(`${what}: ${tookMs.toFixed(0)} ms`);
        assert.ok(tookMs <= SERVER_TIMEOUT_MS + FAILURE_MARGIN_MS, `${what} took ${tookMs.toFixed(0)} ms`);
        if (fails) assert.ok(outcome instanceof LockServerUnreachableError, `${what}: ${String(outcome)}`);
      };
      await within('acquire (read)', () => acquire(backend, 'paused', 'read'));
      await within('acquire (permit)', () => acquire(backend, 'paused-sem', 'permit', { limit: 2 }));
      await within('tryAcquire (permit)', () => backend.tryAcquire({ key: 'paused-sem', owner: owner('try'), ttlMs: TTL_MS, mode: 'permit', limit: 2 }));
      await within('renew (read)', () => backend.renew(reader, TTL_MS));
      await within('release (permit)', () => backend.release(permit));
      await within('inspect', () => backend.inspect!('paused'));
    } finally {
      paused.server.resume();
      await backend.close();
      await paused.stop();
    }
  });
});
