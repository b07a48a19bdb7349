import 'reflect-metadata';
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { Pool } from 'pg';
import type { LockService } from '../../../lib';
import { createBackend } from '../../../lib/backends/registry';
import { DEFAULT_NAMES } from '../../../lib/backends/postgres/postgres-names';
import { statements } from '../../../lib/backends/postgres/postgres-statements';
import { runSql, startPostgresServer, type PostgresServer } from '../../../servers/postgres-server';
import { lockServiceOver } from '../../support/lock-service-factory';
import { hookPooledQueries, type ClientQuery } from '../../support/pooled-queries';
import { sleep } from '../../support/timing';

/** The holder's lease: far longer than the waiter's second wait, so a stranded grant cannot expire in time to hide the bug. */
const TTL_MS = 30_000;
const SECOND_WAIT_MS = 3_000;
const RELEASE_TEXT = statements(DEFAULT_NAMES).release;

/**
 * The holder's own pg Pool, with one hook: when armed, its next release statement runs inside a
 * transaction that stays open (its hand-off made, not yet committed) until the test commits it.
 * That is the window a loaded machine opens by chance: a release on its way at the server. The
 * hook sits on each pooled connection as it is checked out, since the backend sends statements
 * through pool.query or on a connection it keeps between back-to-back statements.
 */
class HeldOpenRelease {
  readonly pool: Pool;
  private armed = false;
  private ran?: (handedTo: unknown) => void;
  private commit?: () => void;

  constructor(url: string) {
    this.pool = new Pool({ connectionString: url, application_name: 'test-holder' });
    // As the backend's own pool: an idle connection the server drops (it stops) is no uncaught error.
    this.pool.on('error', () => undefined);
    hookPooledQueries(this.pool, (query) => this.heldOpenWhenArmed(query));
  }

  /** Resolves with whom the next release handed the lock to, once that release ran (uncommitted). */
  arm(): Promise<unknown> {
    this.armed = true;
    return new Promise((resolve) => (this.ran = resolve));
  }

  commitNow(): void {
    this.commit?.();
  }

  /** `query`, except that the armed release runs held open (runHeldOpen), answered in the caller's form. */
  private heldOpenWhenArmed(query: ClientQuery): ClientQuery {
    return (config, values, callback) => {
      const text = typeof config === 'string' ? config : config.text;
      if (!this.armed || text !== RELEASE_TEXT) return query(config, values, callback);
      this.armed = false;
      const held = this.runHeldOpen(query, text, (typeof config === 'string' ? values : config.values) as unknown[] | undefined);
      const done = (typeof values === 'function' ? values : callback) as ((error: unknown, result?: unknown) => void) | undefined;
      if (!done) return held;
      held.then((result) => done(null, result), (error: unknown) => done(error));
      return undefined;
    };
  }

  /** The statement in a transaction on the same connection, committed when the test says so. */
  private async runHeldOpen(query: ClientQuery, text: string, values: unknown[] | undefined) {
    await query('BEGIN');
    const result = (await query(text, values)) as { rows: Array<{ handed_to?: unknown }> };
    await new Promise<void>((resolve) => {
      this.commit = resolve;
      this.ran!(result.rows[0]?.handed_to);
    });
    await query('COMMIT');
    return result;
  }
}

describe('postgres: a waiter that aborts while the lock is being handed to it', () => {
  let postgres: PostgresServer;
  let holderPool: HeldOpenRelease;
  const services: LockService[] = [];

  before(async () => (postgres = await startPostgresServer()));
  after(async () => {
    for (const service of services) await service.onApplicationShutdown();
    await holderPool?.pool.end();
    await postgres.stop();
  });

  it("its leaving the queue, racing the holder's hand-off to it, frees the lock: its own next acquire gets it", async (t) => {
    holderPool = new HeldOpenRelease(postgres.url);
    const holderService = lockServiceOver(await createBackend({ type: 'postgres', pool: holderPool.pool }));
    const waiterService = lockServiceOver(await createBackend({ type: 'postgres', url: postgres.url }));
    services.push(holderService, waiterService);
    // LockService prefixes the name: the rows are found by its end.
    const name = 'abort-during-hand-off';
    const holder = await holderService.acquire(name, { ttlMs: TTL_MS });

    const controller = new AbortController();
    const waiting = waiterService.acquire(name, { ttlMs: TTL_MS, signal: controller.signal, waitTimeoutMs: 20_000 });
    await until(async () => (await runSql(postgres.url, 'SELECT 1 FROM distributed_locks_queue WHERE name LIKE $1', [`%${name}`])).length === 1, 'the waiter never queued');
    const [{ owner: waiterEntry }] = await runSql<{ owner: string }>(postgres.url, 'SELECT owner FROM distributed_locks_queue WHERE name LIKE $1', [`%${name}`]);

    // The holder's release hands the lock to the waiter's entry, and is not committed yet...
    const handedTo = holderPool.arm();
    const released = holder.release();
    assert.equal(await handedTo, waiterEntry);
    // ...when the waiter gives up: its statement leaving the queue meets the hand-off at the server.
    controller.abort(new Error('gave up'));
    await assert.rejects(waiting, /gave up/);
    await until(
      async () => (await runSql(postgres.url, "SELECT 1 FROM pg_stat_activity WHERE application_name = 'nest-distributed-lock' AND wait_event_type = 'Lock'")).length > 0,
      "the waiter's statement leaving the queue never waited for the hand-off's row locks",
    );
    holderPool.commitNow();
    await released;

    const startedAt = performance.now();
    const again = await waiterService.acquire(name, { ttlMs: TTL_MS, waitTimeoutMs: SECOND_WAIT_MS }).catch((error: Error) => error);
    const waitedMs = Math.round(performance.now() - startedAt);
    const row = await runSql(postgres.url, 'SELECT owner, contended FROM distributed_locks WHERE name LIKE $1', [`%${name}`]);
    t.diagnostic(`the waiter's next acquire ended after ${waitedMs} ms (bound ${SECOND_WAIT_MS} ms); the row then: ${JSON.stringify(row)}`);
    assert.ok(!(again instanceof Error), `the next acquire failed (${(again as Error).message}): the lock was left with the entry that left`);
    assert.ok(again.fencingToken > holder.fencingToken);
    await again.release();
    const [freed] = await runSql<{ owner: string | null }>(postgres.url, 'SELECT owner FROM distributed_locks WHERE name LIKE $1', [`%${name}`]);
    assert.equal(freed.owner, null, 'the lock is not free after its last holder released it');
  });
});

async function until(condition: () => Promise<boolean>, failure: string, timeoutMs = 5_000): Promise<void> {
  const deadline = performance.now() + timeoutMs;
  while (!(await condition())) {
    if (performance.now() > deadline) assert.fail(`${failure} (within ${timeoutMs} ms)`);
    await sleep(20);
  }
}
