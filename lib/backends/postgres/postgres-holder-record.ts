import { Logger } from '@nestjs/common';
import { HOLDER_RECORD_REFRESH_MS, HOLDER_RECORD_TTL_MS } from '../../lock-defaults';
import type { PostgresCalls } from './postgres-calls';
import { sqlNames, type PostgresNames } from './postgres-names';


/** Every client id is 18 hex digits (72 random bits), and every entry's owner starts with its client's. */
export const CLIENT_ID_LENGTH = 18;

const logger = new Logger('DistributedLock');

/**
 * This backend client's row in `<table>_clients` (its holder description, for inspect): upserted
 * when the backend starts and every HOLDER_RECORD_REFRESH_MS with an expiry, so nothing is written per
 * lock and no lock statement waits for it; deleted at close. Also answers whether that table
 * exists: a schema made by an older version with `createSchema: false` lacks it, and then no
 * row is written and inspect reads none. Best effort throughout: a failure only means inspect
 * shows no description.
 */
export class PostgresHolderRecord {
  private readonly upsertSql: string;
  private readonly deleteSql: string;
  private readonly table: string;
  /** Whether the table exists, once known (a check that failed is asked again). */
  private present?: Promise<boolean>;
  private timer?: NodeJS.Timeout;
  private failed = false;

  constructor(
    private readonly calls: PostgresCalls,
    names: PostgresNames,
    private readonly clientId: string,
    /** The module's holderDescription; none: only the table check, for inspect. */
    private readonly description: string | undefined,
  ) {
    const n = sqlNames(names);
    this.table = n.clients;
    // Rows of processes gone are deleted by the live ones, in the same statement.
    this.upsertSql =
      `WITH gone AS (DELETE FROM ${n.clients} WHERE expires_at < clock_timestamp() AND client_id <> $1) ` +
      `INSERT INTO ${n.clients} (client_id, description, expires_at) VALUES ($1, $2, clock_timestamp() + $3 * interval '1 millisecond') ` +
      'ON CONFLICT (client_id) DO UPDATE SET description = EXCLUDED.description, expires_at = EXCLUDED.expires_at';
    this.deleteSql = `DELETE FROM ${n.clients} WHERE client_id = $1`;
  }

  /** Writes the row now and keeps it fresh until remove(). */
  start(): void {
    if (this.description === undefined) return;
    void this.write();
    this.timer = setInterval(() => void this.write(), HOLDER_RECORD_REFRESH_MS);
    this.timer.unref();
  }

  /** Whether `<table>_clients` exists: one statement, asked once (again after one that failed). */
  tablePresent(): Promise<boolean> {
    this.present ??= this.calls.query<{ present: boolean }>('find the holder descriptions table', 'SELECT to_regclass($1) IS NOT NULL AS present', [this.table]).then(
      ([row]) => {
        if (!row.present) logger.debug(`${this.table} is missing (a schema made by an older version): inspect shows no holder descriptions until sql/postgres-locks.sql is run again.`);
        return row.present;
      },
      () => {
        this.present = undefined;
        return false;
      },
    );
    return this.present;
  }

  /** Stops the refreshes and deletes the row (when one may have been written). */
  async remove(): Promise<void> {
    clearInterval(this.timer);
    if (this.timer === undefined || !(await this.present)) return;
    await this.calls.query('remove the holder description', this.deleteSql, [this.clientId]).catch(() => undefined);
  }

  private async write(): Promise<void> {
    if (!(await this.tablePresent())) return;
    try {
      await this.calls.query('record the holder description', this.upsertSql, [this.clientId, this.description, HOLDER_RECORD_TTL_MS]);
      this.failed = false;
    } catch (error) {
      // Once per run of failures: the locks are not affected, only what inspect can show.
      if (!this.failed) logger.debug(`The holder description was not recorded, inspect shows none until it is: ${(error as Error).message}`);
      this.failed = true;
    }
  }
}
