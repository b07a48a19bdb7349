import type { BackendSettings } from '../backend-definition';
import { Diagnosis, type DoctorReport } from '../backend-doctor';
import { checkClock } from '../clock-check';
import { loadPeer } from '../load-peer';
import { postgresAddress, type PostgresBackendOptions } from './postgres-options';

/** Every setting in one statement: durability, whether this is a standby, the version, the clock. */
const SETTINGS_SQL =
  "SELECT current_setting('fsync') AS fsync, current_setting('synchronous_commit') AS synchronous_commit, " +
  "current_setting('full_page_writes') AS full_page_writes, current_setting('server_version') AS version, " +
  'pg_is_in_recovery() AS standby, (extract(epoch FROM clock_timestamp()) * 1000)::float8 AS now_ms';

interface Settings {
  fsync: string;
  synchronous_commit: string;
  full_page_writes: string;
  version: string;
  standby: boolean;
  now_ms: number;
}

/**
 * What PostgreSQL lets the backend's own role read: the settings that decide whether a committed
 * grant and a sequence value survive a crash, as the sessions the backend opens see them (a
 * setting per database or role included), and the server's clock. synchronous_commit is read
 * but is no finding: the backend's statements set it on for themselves.
 */
export async function doctorPostgres(options: PostgresBackendOptions, settings: BackendSettings): Promise<DoctorReport> {
  const poolSettings = (options.pool as { options?: { connectionString?: string; host?: string; port?: number } } | undefined)?.options;
  const server = options.pool ? postgresAddress(poolSettings) : postgresAddress({ connectionString: options.url });
  const diagnosis = new Diagnosis('postgres', server);
  let row: Settings;
  const sentAt = Date.now();
  try {
    row = await readSettings(options, settings.serverTimeoutMs);
  } catch (error) {
    diagnosis.unreachable(server, error);
    return diagnosis.report();
  }
  const receivedAt = Date.now();
  diagnosis.note(`${server}: PostgreSQL ${row.version}${row.standby ? ', a standby' : ''}`);
  const lost = 'a crash of the server or its machine can lose committed grants and sequence values: a held lock is granted again, and a fencing token can be handed out twice';
  if (row.fsync === 'on') diagnosis.pass(server, 'fsync is on');
  else diagnosis.find({ check: 'fsync', severity: 'error', server, found: 'fsync is off', consequence: `${lost}, and the database itself can be corrupted`, fix: 'fsync = on (postgresql.conf, then reload)' });
  // The backend's lock statements set synchronous_commit = on for their own transaction
  // (DURABLE_CTE, docs/postgres.md): a server or role default of off does not reach its grants.
  diagnosis.pass(
    server,
    row.synchronous_commit === 'off'
      ? 'synchronous_commit is off for these sessions, and every lock statement sets it on for its own transaction: grants are durable'
      : `synchronous_commit is ${row.synchronous_commit}`,
  );
  if (row.full_page_writes === 'on') diagnosis.pass(server, 'full_page_writes is on');
  else diagnosis.find({ check: 'full_page_writes', severity: 'error', server, found: 'full_page_writes is off', consequence: 'a crash mid-write can leave torn pages that recovery cannot repair: the lock tables and their sequence can be corrupted', fix: 'full_page_writes = on (postgresql.conf, then reload)' });
  if (row.standby) {
    diagnosis.find({
      check: 'standby',
      severity: 'error',
      server,
      found: 'the server is a standby (pg_is_in_recovery() is true)',
      consequence: 'a standby is read-only: every acquisition fails',
      fix: 'point backend.url at the primary',
    });
  }
  checkClock(diagnosis, server, Number(row.now_ms), sentAt, receivedAt, settings.ttlMs);
  return diagnosis.report();
}

/** On the supplied pool as it is, or on one short-lived connection made from backend.url. */
async function readSettings(options: PostgresBackendOptions, serverTimeoutMs: number): Promise<Settings> {
  if (options.pool) return ((await options.pool.query(SETTINGS_SQL)) as { rows: Settings[] }).rows[0];
  const { Client } = loadPeer<typeof import('pg')>('pg', 'postgres');
  const client = new Client({ connectionString: options.url, connectionTimeoutMillis: serverTimeoutMs, query_timeout: serverTimeoutMs, application_name: 'nest-distributed-lock-doctor' });
  // A connection that dies later is reported through the query; never an unhandled error.
  client.on('error', () => undefined);
  await client.connect();
  try {
    return (await client.query<Settings>(SETTINGS_SQL)).rows[0];
  } finally {
    await client.end().catch(() => undefined);
  }
}
