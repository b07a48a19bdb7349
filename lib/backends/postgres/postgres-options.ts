import { LockConfigError } from '../../errors';
import { allowOnlyFields, checkSuppliedClient } from '../option-checks';
import { DEFAULT_NAMES } from './postgres-names';

/**
 * The parts of a `pg.Pool` the backend uses, typed structurally so that the published .d.ts
 * never imports pg (an optional peer). A `pg.Pool` fits.
 */
export interface PgPoolLike {
  query(text: string, values?: unknown[]): Promise<unknown>;
  /** A named statement: prepared once per connection. */
  query(config: { name: string; text: string; values?: unknown[] }): Promise<unknown>;
  connect(): Promise<unknown>;
  /** Callers waiting for a connection (pg.Pool has it): a pool that says so lets the backend keep a connection between back-to-back statements. */
  readonly waitingCount?: number;
  /** pg.Pool keeps the settings it was made with: the LISTEN connection is opened with them. */
  readonly options?: object;
}

/**
 * `{ type: 'postgres', url }`, or `{ type: 'postgres', pool }` to share an existing `pg.Pool`.
 * Holding a lock pins no connection: each call is one statement on any pooled connection, so the
 * pool may go through PgBouncer in transaction mode (statements that come back to back share one
 * connection, given back to the pool as the event loop turns, or at once when someone waits for
 * one). Waiting uses one LISTEN connection per process, which must reach PostgreSQL itself or a
 * session-mode pool (see `listenUrl`).
 */
export interface PostgresBackendOptions {
  type: 'postgres';
  /** `postgres://user:password@host:5432/database`, as pg takes it. Default: pg's own defaults (PGHOST and friends). */
  url?: string;
  /** An existing `pg.Pool`. Never closed by the library. */
  pool?: PgPoolLike;
  /**
   * Where the LISTEN connection goes, when `url` (or `pool`) is a PgBouncer in transaction mode,
   * which cannot carry LISTEN: PostgreSQL itself, or a PgBouncer pool in session mode. Default:
   * `url`, or the pool's own settings.
   */
  listenUrl?: string;
  /** Schema of the backend's tables and functions. Default 'public'. */
  schema?: string;
  /** Name of the locks table; the queue, sequence and functions are named after it. Default 'distributed_locks'. */
  table?: string;
  /**
   * Create the tables and functions on first use (`CREATE ... IF NOT EXISTS`). `false` for teams
   * that run DDL through their migrations: run sql/postgres-locks.sql (or `postgresLockSchemaSql()`)
   * there. Default true.
   */
  createSchema?: boolean;
}

/** Lower-case SQL identifiers, short enough for the longest derived name (`<table>_queue_by_owner`) to fit 63 bytes. */
const IDENTIFIER = /^[a-z_][a-z0-9_]{0,44}$/;

/** Checks the options before any connection is made; the error names the option to change. */
export function validatePostgresOptions(options: PostgresBackendOptions): void {
  allowOnlyFields('postgres', options, ['url', 'pool', 'listenUrl', 'schema', 'table', 'createSchema']);
  checkSuppliedClient(options as unknown as Record<string, unknown>, ['url'], ['query', 'connect'], 'a pg Pool', 'pool');
  for (const field of ['url', 'listenUrl'] as const) {
    const value = options[field];
    if (value === undefined) continue;
    if (typeof value !== 'string' || !/^postgres(ql)?:\/\//.test(value)) {
      throw new LockConfigError(`backend.${field}`, `must be a 'postgres://user:password@host:port/database' URL, got ${JSON.stringify(redact(value))}.`);
    }
  }
  for (const field of ['schema', 'table'] as const) {
    const value = options[field];
    if (value !== undefined && (typeof value !== 'string' || !IDENTIFIER.test(value))) {
      throw new LockConfigError(`backend.${field}`, `must be a lower-case SQL identifier of at most 45 characters (letters, digits, _), got ${JSON.stringify(value)}.`);
    }
  }
  if (options.createSchema !== undefined && typeof options.createSchema !== 'boolean') {
    throw new LockConfigError('backend.createSchema', `must be true or false, got ${JSON.stringify(options.createSchema)}.`);
  }
}

export function namesOf(options: PostgresBackendOptions) {
  return { schema: options.schema ?? DEFAULT_NAMES.schema, table: options.table ?? DEFAULT_NAMES.table };
}

/** 'host:port' of a connection string or pg settings, as errors show it: never a password. */
export function postgresAddress(settings: { connectionString?: string; host?: string; port?: number | string } | undefined): string {
  if (settings?.connectionString) {
    try {
      const url = new URL(settings.connectionString);
      return `${url.hostname || process.env.PGHOST || 'localhost'}:${url.port || process.env.PGPORT || 5432}`;
    } catch {
      return 'postgres';
    }
  }
  return `${settings?.host ?? process.env.PGHOST ?? 'localhost'}:${settings?.port ?? process.env.PGPORT ?? 5432}`;
}

function redact(value: unknown): unknown {
  return typeof value === 'string' ? value.replace(/\/\/[^@/]*@/, '//***@') : value;
}
