import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { Pool } from 'pg';
import type { BackendOptions, LockService } from '../../../lib';
import { postgresLockSchemaSql } from '../../../lib/backends/postgres/postgres-schema';
import { createBackend } from '../../../lib/backends/registry';
import { runSql, startPostgresServer, type PostgresServer } from '../../../servers/postgres-server';
import { lockServiceOver, moduleLikeService } from '../../support/lock-service-factory';
import { hookPooledQueries } from '../../support/pooled-queries';
import { eventually } from '../../support/timing';
import { holderDescriptionCases, type HolderRecord } from '../holder-description-cases';

/**
 * Each process keeps its holder description in a row of `<table>_clients` with an expiry,
 * refreshed on a timer (postgres-holder-record.ts); inspect reads it in its one statement.
 */
describe('postgres backend: the holder description', () => {
  let postgres: PostgresServer;
  const pools: Pool[] = [];
  const backend = (): BackendOptions => ({ type: 'postgres', url: postgres.url });

  /** A real pool that counts the statements its connections run (through pool.query, or on a connection the backend keeps). */
  const countingPool = () => {
    const pool = new Pool({ connectionString: postgres.url });
    // pg-pool's end() resolves before its clients have closed: the server's shutdown may still reach one, as an error of the pool.
    pool.on('error', () => undefined);
    pools.push(pool);
    let statements = 0;
    hookPooledQueries(pool, (query) => (config, values, callback) => {
      statements++;
      return query(config, values, callback);
    });
    return { pool, statements: () => statements };
  };

  before(async () => {
    postgres = await startPostgresServer();
  });
  after(async () => {
    await Promise.all(pools.map((pool) => pool.end()));
    await postgres?.stop();
  });

  holderDescriptionCases(
    () => ({
      backend: backend(),
      records: () =>
        runSql<HolderRecord>(
          postgres.url,
          'SELECT description, extract(epoch from expires_at - clock_timestamp()) * 1000 AS "expiresInMs" FROM public.distributed_locks_clients WHERE expires_at > clock_timestamp()',
        ).then((rows) => rows.map((row) => ({ description: row.description, expiresInMs: Number(row.expiresInMs) }))),
      counted: async (holderDescription) => {
        const { pool, statements } = countingPool();
        const options = { type: 'postgres' as const, pool };
        // Without a description: built as outside the module, which records nothing.
        const service =
          holderDescription === undefined
            ? lockServiceOver(await createBackend(options, { ttlMs: 30_000, serverTimeoutMs: 5_000 }))
            : (await moduleLikeService({ backend: options, holderDescription })).service;
        return { service, work: async () => statements() };
      },
    }),
    { readLocks: true, recordsPerProcess: true },
  );

  describe('a schema made by an older version, without the clients table', () => {
    const services: LockService[] = [];
    const service = async (createSchema: boolean) => {
      const made = (await moduleLikeService({ backend: { type: 'postgres', url: postgres.url, table: 'older_locks', createSchema }, holderDescription: 'older-pod' })).service;
      services.push(made);
      return made;
    };
    before(async () => {
      await runSql(postgres.url, postgresLockSchemaSql({ table: 'older_locks' }));
      await runSql(postgres.url, 'DROP TABLE public.older_locks_clients');
    });
    after(async () => {
      await Promise.all(services.map((each) => each.onApplicationShutdown()));
    });

    it('createSchema: false: locks and inspect work as before, with no description', async () => {
      const locks = await service(false);
      const handle = await locks.acquire('older');
      try {
        const seen = await locks.inspect('older');
        assert.equal(seen.held, true);
        assert.equal(seen.holder?.description, undefined);
      } finally {
        await handle.release();
      }
      const [{ present }] = await runSql<{ present: boolean }>(postgres.url, "SELECT to_regclass('public.older_locks_clients') IS NOT NULL AS present");
      assert.equal(present, false, 'createSchema: false created a table');
    });

    it('createSchema: true: the table is added, and the description shown', async () => {
      const locks = await service(true);
      const handle = await locks.acquire('upgraded');
      try {
        // The row is written beside the first statements, not before them.
        await eventually(async () => (await locks.inspect('upgraded')).holder?.description === 'older-pod', 5_000, 'the description', 20);
      } finally {
        await handle.release();
      }
    });
  });
});
