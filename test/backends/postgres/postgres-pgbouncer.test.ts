import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import type { LockService } from '../../../lib';
import { createBackend } from '../../../lib/backends/registry';
import { lockServiceOver } from '../../support/lock-service-factory';
import { startPgBouncer, type PgBouncerServer } from '../../../servers/pgbouncer-server';
import { runSql, startPostgresServer, type PostgresServer } from '../../../servers/postgres-server';
import { assertExclusive, type HoldInterval } from '../../support/timing';

/** PgBouncer's server connections: fewer than the locks held at once below. */
const SERVER_CONNECTIONS = 2;
const HELD_AT_ONCE = 6;

/**
 * The claim that holding a lock pins no connection: lock statements through PgBouncer in
 * transaction mode (2 server connections for everyone), LISTEN straight to PostgreSQL
 * (`listenUrl`: LISTEN needs a session, which transaction mode does not keep).
 */
describe('postgres backend through PgBouncer in transaction mode', () => {
  let postgres: PostgresServer;
  let bouncer: PgBouncerServer;
  const services: LockService[] = [];
  const service = async () => {
    const created = lockServiceOver(await createBackend({ type: 'postgres', url: bouncer.url, listenUrl: postgres.url }));
    services.push(created);
    return created;
  };

  before(async () => {
    postgres = await startPostgresServer();
    bouncer = await startPgBouncer(postgres.port, SERVER_CONNECTIONS);
  });
  after(async () => {
    await Promise.all(services.map((created) => created.onApplicationShutdown()));
    await bouncer?.stop();
    await postgres?.stop();
  });

  it(`holds ${HELD_AT_ONCE} locks at once over ${SERVER_CONNECTIONS} server connections, and still takes another`, async () => {
    const [a, b] = [await service(), await service()];
    const held = await Promise.all(Array.from({ length: HELD_AT_ONCE }, (_, i) => (i % 2 ? a : b).acquire(`bouncer-held-${i}`, { waitTimeoutMs: 5_000 })));
    const [{ count }] = await runSql<{ count: string }>(postgres.url, "SELECT count(*)::text AS count FROM pg_stat_activity WHERE application_name <> 'nest-distributed-lock-listen' AND backend_type = 'client backend' AND datname = 'postgres' AND state <> 'idle' AND pid <> pg_backend_pid()");
    assert.equal(count, '0', 'a held lock kept a statement or transaction open at the server');
    const another = await a.acquire('bouncer-another', { waitTimeoutMs: 3_000 });
    await another.release();
    await Promise.all(held.map((lock) => lock.release()));
  });

  it('hands a contended lock over across clients (NOTIFY reaches the waiter), exclusive with increasing tokens', async () => {
    const clients = [await service(), await service(), await service()];
    const intervals: HoldInterval[] = [];
    let inside = 0;
    await Promise.all(
      Array.from({ length: 60 }, (_, i) =>
        clients[i % 3].withLock(
          'bouncer-contended',
          async (lock) => {
            const start = process.hrtime.bigint();
            assert.equal(++inside, 1, 'two holders inside at once');
            await new Promise((resolve) => setTimeout(resolve, 2));
            inside--;
            intervals.push({ start, end: process.hrtime.bigint(), fencingToken: lock.fencingToken, holder: `caller ${i}` });
          },
          { waitTimeoutMs: 30_000 },
        ),
      ),
    );
    assert.equal(intervals.length, 60);
    assertExclusive(intervals, { tokens: true });
  });

  it('grants read and permit entries through it: readers of two clients hold at once, a third permit of two waits for a release', async () => {
    const backends = await Promise.all([0, 1].map(() => createBackend({ type: 'postgres', url: bouncer.url, listenUrl: postgres.url })));
    try {
      const ask = (i: number, key: string, mode: 'read' | 'permit') => backends[i].acquire({ key, owner: `bouncer-${key}-${Math.random()}`, ttlMs: 10_000, signal: new AbortController().signal, mode, limit: mode === 'permit' ? 2 : undefined });
      const readers = await Promise.all([ask(0, 'bouncer-read', 'read'), ask(1, 'bouncer-read', 'read')]);
      assert.equal((await backends[0].inspect!('bouncer-read')).holders?.length, 2);
      const permits = await Promise.all([ask(0, 'bouncer-permit', 'permit'), ask(1, 'bouncer-permit', 'permit')]);
      let third = false;
      const waiting = ask(0, 'bouncer-permit', 'permit').then((grant) => ((third = true), grant));
      await new Promise((resolve) => setTimeout(resolve, 200));
      assert.equal(third, false, 'a third permit of two was granted');
      await backends[1].release(permits[1]);
      const granted = await waiting;
      assert.ok(granted.fencingToken > permits[1].fencingToken);
      await backends[0].release(readers[0]);
      await backends[1].release(readers[1]);
      await backends[0].release(permits[0]);
      await backends[0].release(granted);
      assert.deepEqual(await backends[1].inspect!('bouncer-permit'), { held: false, waiting: 0 });
    } finally {
      await Promise.all(backends.map((backend) => backend.close()));
    }
  });
});
