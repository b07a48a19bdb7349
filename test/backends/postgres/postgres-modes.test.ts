import assert from 'node:assert/strict';
import { fork } from 'node:child_process';
import path from 'node:path';
import { after, before, describe, it } from 'node:test';
import { LockConfigError } from '../../../lib/errors';
import type { EntryMode, LockBackend, LockGrant } from '../../../lib/backends/lock-backend.interface';
import { createBackend } from '../../../lib/backends/registry';
import { runSql, startPostgresServer, type PostgresServer } from '../../../servers/postgres-server';
import { eventually, meetingOf, mostAtOnce, sleep } from '../../support/timing';

const TTL_MS = 10_000;
/** The crashed permit holder's lease: short, so the test waits for its end. */
const CRASH_TTL_MS = 2_000;
/**
 * docs/postgres.md: a waiter re-checks 25 ms after the end of the earliest lease ahead of it, in
 * one statement; this allows that margin and the statement's round trip on a loaded machine.
 */
const AFTER_LEASE_BOUND_MS = 25 + 475;

interface Hold {
  readonly mode: EntryMode;
  readonly who: string;
  readonly token: bigint;
  readonly start: bigint;
  end: bigint;
}

let ownerSeq = 0;

/** One acquisition on a backend, as LockService would ask for it. */
function ask(backend: LockBackend, key: string, mode: EntryMode, options: { limit?: number; ttlMs?: number; signal?: AbortSignal } = {}): Promise<LockGrant> {
  return backend.acquire({ key, owner: `owner-${ownerSeq++}`, ttlMs: options.ttlMs ?? TTL_MS, signal: options.signal ?? new AbortController().signal, mode, limit: options.limit });
}

/**
 * Holds `key` for `holdMs` once granted, recording the interval on one clock; with a meeting, for
 * `holdMs` after the others of it have been granted too.
 */
async function holdFor(backend: LockBackend, key: string, mode: EntryMode, holdMs: number, holds: Hold[], who: string, meeting?: ReturnType<typeof meetingOf>): Promise<Hold> {
  const grant = await ask(backend, key, mode);
  const hold: Hold = { mode, who, token: grant.fencingToken, start: process.hrtime.bigint(), end: 0n };
  holds.push(hold);
  await meeting?.join();
  await sleep(holdMs);
  hold.end = process.hrtime.bigint();
  await backend.release(grant);
  return hold;
}


/** A hold that ended before another began has the smaller token: tokens increase in grant order. */
function assertTokensInGrantOrder(holds: Hold[]): void {
  assert.equal(new Set(holds.map((hold) => hold.token)).size, holds.length, 'two grants share a token');
  for (const a of holds) for (const b of holds) if (a.end <= b.start) assert.ok(a.token < b.token, `${a.who} (token ${a.token}) ended before ${b.who} (token ${b.token}) began`);
}

describe('postgres: read locks and semaphores across processes', () => {
  let postgres: PostgresServer;
  let clients: LockBackend[];

  before(async () => {
    postgres = await startPostgresServer();
    clients = await Promise.all([0, 1, 2].map(() => createBackend({ type: 'postgres', url: postgres.url })));
  });
  after(async () => {
    await Promise.all(clients.map((client) => client.close()));
    await postgres.stop();
  });

  it('lists its modes', () => {
    assert.deepEqual(clients[0].modes, ['write', 'read', 'permit']);
  });

  it('readers overlap, a writer overlaps nobody, and a reader behind a queued writer goes after it', async () => {
    const key = 'modes-rw';
    const holds: Hold[] = [];
    const firstReaders = meetingOf(3);
    const first = [0, 1, 2].map((i) => holdFor(clients[i], key, 'read', 300, holds, `reader ${i}`, firstReaders));
    await eventually(async () => holds.length === 3, 5_000, 'the first three readers to hold');
    const writer = holdFor(clients[0], key, 'write', 200, holds, 'writer');
    await eventually(async () => (await clients[1].inspect!(key)).waiting === 1, 5_000, 'the writer to queue');
    const lateReaders = meetingOf(2);
    const late = [1, 2].map((i) => holdFor(clients[i], key, 'read', 100, holds, `late reader ${i}`, lateReaders));
    await Promise.all([...first, writer, ...late]);

    const w = holds.find((hold) => hold.who === 'writer')!;
    for (const other of holds) if (other !== w) assert.ok(other.end <= w.start || other.start >= w.end, `${other.who} overlapped the writer`);
    assert.equal(mostAtOnce(holds.filter((hold) => hold.who.startsWith('reader'))), 3, 'the readers of three clients did not all hold at once');
    for (const hold of holds.filter((each) => each.who.startsWith('late'))) {
      assert.ok(hold.start >= w.end && hold.token > w.token, `${hold.who} arrived behind the queued writer but went before it`);
    }
    assert.ok(mostAtOnce(holds.filter((hold) => hold.who.startsWith('late'))) === 2, 'the two late readers did not hold together');
    assertTokensInGrantOrder(holds);
  });

  it('a semaphore of 3 with 12 callers over 3 clients has at most 3 holders, and reaches 3', async () => {
    const key = 'modes-semaphore';
    const holds: Hold[] = [];
    let inside = 0;
    let most = 0;
    const firstThree = meetingOf(3);
    await Promise.all(
      Array.from({ length: 12 }, async (_, i) => {
        const grant = await ask(clients[i % 3], key, 'permit', { limit: 3 });
        most = Math.max(most, ++inside);
        await firstThree.join();
        const hold: Hold = { mode: 'permit', who: `permit ${i}`, token: grant.fencingToken, start: process.hrtime.bigint(), end: 0n };
        holds.push(hold);
        await sleep(60);
        hold.end = process.hrtime.bigint();
        inside--;
        await clients[i % 3].release(grant);
      }),
    );
    assert.equal(holds.length, 12);
    assert.ok(most <= 3 && mostAtOnce(holds) <= 3, `more than 3 permits were held at once (${most})`);
    assert.equal(mostAtOnce(holds), 3, 'the semaphore never reached 3 holders');
    assertTokensInGrantOrder(holds);
  });

  it('the permits of one process each take their own permit: a semaphore of 4 in one process reaches 4 holders', async () => {
    const key = 'modes-one-process';
    const grants = await Promise.all(Array.from({ length: 4 }, () => ask(clients[0], key, 'permit', { limit: 4 })));
    const fifth = ask(clients[0], key, 'permit', { limit: 4 });
    const inspection = await clients[1].inspect!(key);
    assert.equal(inspection.holders?.length, 4);
    await eventually(async () => (await clients[1].inspect!(key)).waiting === 1, 5_000, 'the fifth permit to queue');
    await clients[0].release(grants[0]);
    const granted = await fifth;
    assert.ok(granted.fencingToken > grants[3].fencingToken);
    for (const grant of [...grants.slice(1), granted]) await clients[0].release(grant);
  });

  it('the readers of one process hold together under one entry, which stays while any of them holds', async () => {
    const key = 'modes-one-process-read';
    const readers = await Promise.all(Array.from({ length: 3 }, () => ask(clients[1], key, 'read')));
    const tokens = readers.map((grant) => grant.fencingToken).sort((a, b) => (a < b ? -1 : 1));
    assert.equal(new Set(tokens).size, 3, 'two readers share a token');
    assert.deepEqual((await clients[0].inspect!(key)).holders?.map((holder) => holder.fencingToken), [tokens[0]], 'not one entry for the readers of one process');
    // Renewed for one reader with a short ttl, the entry keeps the lease the other readers count on.
    assert.equal(await clients[1].renew(readers[0], 1_000), true);
    const expiresInMs = (await clients[0].inspect!(key)).holders![0].expiresInMs!;
    assert.ok(expiresInMs > TTL_MS / 2, `one reader's renewal shortened the entry's lease to ${expiresInMs} ms`);
    await clients[1].release(readers[0]);
    await clients[1].release(readers[1]);
    assert.equal((await clients[0].inspect!(key)).held, true, 'the entry left while a reader still held');
    await clients[1].release(readers[2]);
    assert.deepEqual(await clients[0].inspect!(key), { held: false, waiting: 0 });
  });

  it('a read entry that is gone is lost for every reader it served', async () => {
    const key = 'modes-one-process-read-lost';
    const readers = await Promise.all([ask(clients[1], key, 'read'), ask(clients[1], key, 'read')]);
    assert.equal(await clients[0].forceRelease!(key), true);
    assert.equal(await clients[1].renew(readers[0], TTL_MS), false, 'a force-released reader renewed');
    assert.equal(await clients[1].renew(readers[1], TTL_MS), false, 'the other reader of the force-released entry renewed');
    for (const grant of readers) await clients[1].release(grant);
    assert.deepEqual(await clients[0].inspect!(key), { held: false, waiting: 0 });
  });

  it('tokens strictly increase per key in grant order across modes', async () => {
    const key = 'modes-tokens';
    const tokens: bigint[] = [];
    for (const mode of ['write', 'read', 'permit', 'write', 'permit', 'read'] as const) {
      const grant = await ask(clients[tokens.length % 3], key, mode, { limit: mode === 'permit' ? 2 : undefined });
      tokens.push(grant.fencingToken);
      assert.equal(grant.fencingToken & 0xffffn, 0n, 'a read or permit token is its entry token at turn 0');
      await clients[(tokens.length - 1) % 3].release(grant);
    }
    for (let i = 1; i < tokens.length; i++) assert.ok(tokens[i] > tokens[i - 1], `token ${i} (${tokens[i]}) is not above ${tokens[i - 1]}`);
  });

  it('a writer queued behind readers is granted when the last of them releases', async () => {
    const key = 'modes-writer-waits';
    const readers = await Promise.all([ask(clients[0], key, 'read'), ask(clients[1], key, 'read')]);
    let written = false;
    const writer = ask(clients[2], key, 'write').then((grant) => ((written = true), grant));
    await eventually(async () => (await clients[2].inspect!(key)).waiting === 1, 5_000, 'the writer to queue');
    await clients[0].release(readers[0]);
    await sleep(100);
    assert.equal(written, false, 'the writer went while a reader held');
    await clients[1].release(readers[1]);
    const grant = await writer;
    assert.ok(grant.fencingToken > readers[1].fencingToken);
    assert.equal(await clients[0].tryAcquire({ key, owner: 'try-read', ttlMs: TTL_MS, mode: 'read' }), null, 'a reader took the lock beside the writer');
    await clients[2].release(grant);
  });

  it('a permit holder that dies without releasing gives its permit back within its ttl and the re-check bound', async (t) => {
    const key = 'modes-crash';
    const child = fork(path.join(__dirname, 'postgres-permit-holder.js'), [postgres.url, key, String(CRASH_TTL_MS)], { stdio: ['ignore', 'inherit', 'inherit', 'ipc'] });
    const token = await new Promise<string>((resolve, reject) => {
      child.once('message', (message: { token: string }) => resolve(message.token));
      child.once('exit', (code) => reject(new Error(`the permit holder exited (${code}) before it held`)));
    });
    const grantedAt = performance.now();
    const waiter = ask(clients[0], key, 'permit', { limit: 1 });
    await eventually(async () => (await clients[1].inspect!(key)).waiting === 1, 5_000, 'the waiter to queue');
    child.kill('SIGKILL');
    const grant = await waiter;
    const backAfterMs = Math.round(performance.now() - grantedAt);
    t.diagnostic(`the dead holder's permit came back ${backAfterMs} ms after its grant (bound: ttl ${CRASH_TTL_MS} ms + ${AFTER_LEASE_BOUND_MS} ms)`);
    assert.ok(backAfterMs <= CRASH_TTL_MS + AFTER_LEASE_BOUND_MS, `the permit came back after ${backAfterMs} ms`);
    assert.ok(grant.fencingToken > BigInt(token));
    await clients[0].release(grant);
  });

  it('an aborted waiter leaves no entry behind, and the next caller is granted', async () => {
    const key = 'modes-abort';
    const writer = await ask(clients[0], key, 'write');
    const controllers = [new AbortController(), new AbortController()];
    const reader = ask(clients[1], key, 'read', { signal: controllers[0].signal });
    const permit = ask(clients[2], key, 'permit', { limit: 2, signal: controllers[1].signal });
    await eventually(async () => (await clients[0].inspect!(key)).waiting === 2, 5_000, 'both waiters to queue');
    controllers[0].abort(new Error('gave up'));
    controllers[1].abort(new Error('gave up too'));
    await assert.rejects(reader, /gave up/);
    await assert.rejects(permit, /gave up too/);
    await eventually(async () => (await clients[0].inspect!(key)).waiting === 0, 5_000, 'the aborted entries to leave');
    const [{ count }] = await runSql<{ count: string }>(postgres.url, 'SELECT count(*)::text AS count FROM distributed_locks_queue WHERE name = $1', [key]);
    assert.equal(count, '0');
    await clients[0].release(writer);
    const next = await clients[1].tryAcquire({ key, owner: 'after-abort', ttlMs: TTL_MS, mode: 'write' });
    assert.ok(next, 'the next caller was not granted at once');
    await clients[1].release(next);
  });

  it('a writer that gives up from behind readers lets the reader queued behind it go', async () => {
    const key = 'modes-writer-gives-up';
    const reader = await ask(clients[0], key, 'read');
    const controller = new AbortController();
    const writer = ask(clients[1], key, 'write', { signal: controller.signal });
    await eventually(async () => (await clients[0].inspect!(key)).waiting === 1, 5_000, 'the writer to queue');
    const behind = ask(clients[2], key, 'read');
    await eventually(async () => (await clients[0].inspect!(key)).waiting === 2, 5_000, 'the second reader to queue');
    controller.abort(new Error('writer gave up'));
    await assert.rejects(writer, /writer gave up/);
    const startedAt = performance.now();
    const granted = await behind;
    // Far below the holders' 10 s leases: granted by the writer's leaving, not by a lease's end.
    assert.ok(performance.now() - startedAt < 2_000, `the reader behind the writer waited ${Math.round(performance.now() - startedAt)} ms`);
    assert.equal((await clients[0].inspect!(key)).holders?.length, 2);
    await clients[2].release(granted);
    await clients[0].release(reader);
  });

  it('a reader that gives up as the writer ahead hands over leaves nothing held or queued', async () => {
    const key = 'modes-abort-race';
    for (let round = 0; round < 20; round++) {
      const writer = await ask(clients[0], key, 'write');
      const controller = new AbortController();
      // Granted before the abort, the caller holds and releases; after it, the backend must release.
      const reader = ask(clients[1], key, 'read', { signal: controller.signal }).then(
        (grant) => clients[1].release(grant),
        () => undefined,
      );
      await eventually(async () => (await clients[0].inspect!(key)).waiting === 1, 5_000, 'the reader to queue');
      const released = clients[0].release(writer);
      await sleep(round % 5);
      controller.abort(new Error('gave up'));
      await released;
      await reader;
      // A grant that raced the abort is released: far sooner than the reader's 10 s lease would end.
      await eventually(async () => !(await clients[0].inspect!(key)).held, 2_000, `the name to be free in round ${round}`);
      assert.equal((await clients[0].inspect!(key)).waiting, 0);
    }
  });

  it("close() ends a waiting entry's wait, fires a held entry's lost signal, and lets both go at the server", async () => {
    const key = 'modes-close';
    const closing = await createBackend({ type: 'postgres', url: postgres.url });
    const permit = await ask(closing, key, 'permit', { limit: 1 });
    const waiting = ask(closing, key, 'permit', { limit: 1 }).catch((error: unknown) => error);
    await eventually(async () => (await clients[0].inspect!(key)).waiting === 1, 5_000, 'the second permit to queue');
    await closing.close();
    assert.equal(permit.lost.aborted, true, "the held permit's lost signal did not fire");
    assert.match(String(await waiting), /closed while waiting/);
    assert.deepEqual(await clients[0].inspect!(key), { held: false, waiting: 0 });
  });

  it('rejects a permit whose limit differs from one held or queued, naming the key and both limits', async () => {
    const key = 'modes-limit';
    const held = await ask(clients[0], key, 'permit', { limit: 2 });
    const error = await ask(clients[1], key, 'permit', { limit: 3 }).catch((caught: unknown) => caught);
    assert.ok(error instanceof LockConfigError, `not a LockConfigError: ${String(error)}`);
    assert.equal(error.option, 'limit');
    assert.match(error.message, new RegExp(`${key}.*\\b2\\b.*\\b3\\b`));
    await assert.rejects(clients[2].tryAcquire({ key, owner: 'try-limit', ttlMs: TTL_MS, mode: 'permit', limit: 5 }), LockConfigError);
    assert.equal((await clients[0].inspect!(key)).waiting, 0, 'the rejected permit queued');
    await clients[0].release(held);
  });

  it('inspect reports the mode, limit and every holder; renew and forceRelease act on each entry', async () => {
    const key = 'modes-inspect';
    const permits = [await ask(clients[0], key, 'permit', { limit: 3 }), await ask(clients[1], key, 'permit', { limit: 3 })];
    const waiting = ask(clients[2], key, 'write');
    await eventually(async () => (await clients[0].inspect!(key)).waiting === 1, 5_000, 'the writer to queue');
    const seen = await clients[0].inspect!(key);
    assert.equal(seen.held, true);
    assert.equal(seen.mode, 'permit');
    assert.equal(seen.limit, 3);
    assert.deepEqual(
      seen.holders?.map((holder) => holder.fencingToken),
      permits.map((grant) => grant.fencingToken),
    );
    assert.equal(seen.holder?.fencingToken, permits[0].fencingToken);
    for (const holder of seen.holders!) assert.ok(holder.expiresInMs! > 0 && holder.expiresInMs! <= TTL_MS && holder.heldForMs! >= 0);
    assert.equal(await clients[0].renew(permits[0], TTL_MS), true);

    assert.equal(await clients[0].forceRelease!(key), true);
    const writer = await waiting;
    assert.equal(await clients[0].renew(permits[0], TTL_MS), false, 'a force-released permit renewed');
    assert.equal(await clients[1].renew(permits[1], TTL_MS), false, 'a force-released permit renewed');
    const asWriter = await clients[0].inspect!(key);
    assert.equal(asWriter.mode, 'write');
    assert.equal(asWriter.holder?.fencingToken, writer.fencingToken);
    await clients[2].release(writer);
    assert.deepEqual(await clients[0].inspect!(key), { held: false, waiting: 0 });

    const readers = [await ask(clients[0], key, 'read'), await ask(clients[1], key, 'read')];
    const reading = await clients[2].inspect!(key);
    assert.equal(reading.mode, 'read');
    assert.equal(reading.limit, undefined);
    assert.equal(reading.holders?.length, 2);
    await clients[0].release(readers[0]);
    await clients[0].release(readers[0]);
    await clients[1].release(readers[1]);
    assert.equal(await clients[0].forceRelease!(key), false);
  });
});
