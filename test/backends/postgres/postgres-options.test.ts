import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import path from 'node:path';
import { describe, it } from 'node:test';
import { LockConfigError, postgresLockSchemaSql } from '../../../lib';
import { createBackend, validateBackendOptions } from '../../../lib/backends/registry';

/** Bad input is a LockConfigError naming the option, before any connection is made. */
describe('postgres backend options', () => {
  const rejects = (options: object, option: string) =>
    assert.throws(
      () => validateBackendOptions({ type: 'postgres', ...options }),
      (error: unknown) => error instanceof LockConfigError && error.option === option,
      `${JSON.stringify(options)} was not refused naming ${option}`,
    );

  it('refuses unknown fields, bad urls, bad identifiers, a pool beside a url, a non-pool', () => {
    rejects({ uri: 'postgres://x' }, 'backend.uri');
    rejects({ url: 'mysql://localhost/db' }, 'backend.url');
    rejects({ url: 5432 }, 'backend.url');
    rejects({ listenUrl: 'localhost:5432' }, 'backend.listenUrl');
    rejects({ table: 'Locks' }, 'backend.table');
    rejects({ table: 'locks; drop table x' }, 'backend.table');
    rejects({ schema: 'x'.repeat(46) }, 'backend.schema');
    rejects({ createSchema: 'yes' }, 'backend.createSchema');
    rejects({ pool: { query() {}, connect() {} }, url: 'postgres://localhost/db' }, 'backend.pool');
    rejects({ pool: {} }, 'backend.pool');
  });

  it('fails createBackend before any I/O on bad options (no server exists here)', async () => {
    await assert.rejects(createBackend({ type: 'postgres', url: 'postgres://127.0.0.1:1/db', table: 'Bad' } as never), LockConfigError);
  });

  it('sql/postgres-locks.sql is the schema the backend creates for the default names', () => {
    const file = readFileSync(path.join(__dirname, '../../../../sql/postgres-locks.sql'), 'utf8');
    assert.equal(file, postgresLockSchemaSql());
    assert.match(postgresLockSchemaSql({ schema: 'locks', table: 'app_locks' }), /CREATE TABLE IF NOT EXISTS "locks"\."app_locks_queue"/);
  });
});
