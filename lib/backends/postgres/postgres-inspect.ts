import { batchToken } from '../local-queue/batch';
import type { LockInspection } from '../lock-backend.interface';
import type { PostgresCalls } from './postgres-calls';
import { sqlNames, type PostgresNames } from './postgres-schema';
import { DURABLE_CHECK, DURABLE_CTE } from './postgres-statements';

interface InspectRow {
  owner: string | null;
  fence: string | null;
  expires_in_ms: number | null;
  waiting: number;
}

/**
 * The operator's two statements, each one round trip through PostgresCalls (bounded, wrapped).
 * The lock row's fence is the entry's token: the holder's handle shows it as the batch token of
 * the entry's first turn (later turns of one entry are handed over in the holder's process).
 * `waiting` counts live queue entries, one per batch of a process's callers. The table keeps no
 * grant time, so `heldForMs` is not reported.
 */
export class PostgresInspector {
  private readonly inspectSql: string;
  private readonly forceReleaseSql: string;

  constructor(
    private readonly calls: PostgresCalls,
    names: PostgresNames,
  ) {
    const n = sqlNames(names);
    this.inspectSql =
      `SELECT l.owner, l.fence::text AS fence, extract(epoch from (l.expires_at - clock_timestamp())) * 1000 AS expires_in_ms, ` +
      `(SELECT count(*) FROM ${n.queue} q WHERE q.name = $1 AND q.alive_until > clock_timestamp())::int AS waiting ` +
      `FROM (VALUES (1)) AS one(x) LEFT JOIN ${n.locks} l ON l.name = $1 AND l.expires_at > clock_timestamp()`;
    // The release function with the holder's own owner id: the next live waiter is granted and notified, as at any release.
    this.forceReleaseSql = `WITH ${DURABLE_CTE} SELECT ${n.release}(l.name, l.owner) AS handed_to FROM ${n.locks} l WHERE l.name = $1 AND l.owner IS NOT NULL AND l.expires_at > clock_timestamp() AND ${DURABLE_CHECK}`;
  }

  async inspect(key: string): Promise<LockInspection> {
    const [row] = await this.calls.query<InspectRow>('inspect a lock', this.inspectSql, [key]);
    if (row.owner === null || row.fence === null) return { held: false, waiting: row.waiting };
    const expiresInMs = Math.max(0, Number(row.expires_in_ms));
    return { held: true, holder: { owner: row.owner, fencingToken: batchToken(BigInt(row.fence), 0n), expiresInMs }, waiting: row.waiting };
  }

  async forceRelease(key: string): Promise<boolean> {
    return (await this.calls.query('force the release of a lock', this.forceReleaseSql, [key])).length > 0;
  }
}
