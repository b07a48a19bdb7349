import { batchToken } from '../../queue/batch';
import type { LockInspection } from '../lock-backend.interface';
import type { PostgresCalls } from './postgres-calls';
import { sqlNames, type PostgresNames } from './postgres-names';
import { DURABLE_CHECK, DURABLE_CTE } from './postgres-statements';

interface InspectRow {
  owner: string | null;
  fence: string | null;
  expires_in_ms: number | null;
  waiting: number;
  holders: SharedHolderRow[] | null;
}

/** A read or permit holder, as the inspect statement lists it (json). */
interface SharedHolderRow {
  owner: string;
  mode: 'read' | 'permit';
  lim: number | null;
  fence: string;
  held_ms: number;
  expires_in_ms: number;
}

/**
 * The operator's two statements, each one round trip through PostgresCalls (bounded, wrapped).
 * The lock row's fence is a write entry's token: the holder's handle shows it as the batch token
 * of the entry's first turn (later turns of one entry are handed over in the holder's process).
 * Read and permit holders are listed from their own rows, oldest grant first, with the time since
 * their grant. `waiting` counts live queue entries (a batch of a process's write or read callers,
 * or one permit caller). The locks table keeps no grant time, so a writer's `heldForMs` is not
 * reported.
 */
export class PostgresInspector {
  private readonly inspectSql: string;
  private readonly forceReleaseSql: string;

  constructor(
    private readonly calls: PostgresCalls,
    names: PostgresNames,
  ) {
    const n = sqlNames(names);
    const sinceMs = (value: string) => `extract(epoch from (${value})) * 1000`;
    this.inspectSql =
      `SELECT l.owner, l.fence::text AS fence, ${sinceMs('l.expires_at - clock_timestamp()')} AS expires_in_ms, ` +
      `(SELECT count(*) FROM ${n.queue} q WHERE q.name = $1 AND q.alive_until > clock_timestamp())::int AS waiting, ` +
      `(SELECT json_agg(json_build_object('owner', h.owner, 'mode', h.mode, 'lim', h.lim, 'fence', h.fence::text, ` +
      `'held_ms', ${sinceMs('clock_timestamp() - h.granted_at')}, 'expires_in_ms', ${sinceMs('h.expires_at - clock_timestamp()')}) ORDER BY h.fence) ` +
      `FROM ${n.holders} h WHERE l.owner = '' AND h.name = $1 AND h.expires_at > clock_timestamp()) AS holders ` +
      `FROM (VALUES (1)) AS one(x) LEFT JOIN ${n.locks} l ON l.name = $1 AND l.expires_at > clock_timestamp()`;
    // Every holder of any mode: a writer through the release function (its next waiter is granted and notified, as at any release).
    this.forceReleaseSql = `WITH ${DURABLE_CTE} SELECT ${n.forceRelease}($1::text) AS removed WHERE ${DURABLE_CHECK}`;
  }

  async inspect(key: string): Promise<LockInspection> {
    const [row] = await this.calls.query<InspectRow>('inspect a lock', this.inspectSql, [key]);
    if (row.owner === '') return this.sharedInspection(row);
    if (row.owner === null || row.fence === null) return { held: false, waiting: row.waiting };
    const expiresInMs = Math.max(0, Number(row.expires_in_ms));
    return { held: true, mode: 'write', holder: { owner: row.owner, fencingToken: batchToken(BigInt(row.fence), 0n), expiresInMs }, waiting: row.waiting };
  }

  async forceRelease(key: string): Promise<boolean> {
    const [row] = await this.calls.query<{ removed: boolean }>('force the release of a lock', this.forceReleaseSql, [key]);
    return row?.removed === true;
  }

  /**
   * Read or permit holders, an entry each, shown with the token of its entry's first turn: a read
   * entry stands for every reader of its process's batch (the others hold the next turns).
   */
  private sharedInspection(row: InspectRow): LockInspection {
    const rows = row.holders ?? [];
    if (rows.length === 0) return { held: false, waiting: row.waiting };
    const holders = rows.map((holder) => ({
      owner: holder.owner,
      fencingToken: batchToken(BigInt(holder.fence), 0n),
      heldForMs: Math.max(0, Number(holder.held_ms)),
      expiresInMs: Math.max(0, Number(holder.expires_in_ms)),
    }));
    const { mode, lim } = rows[0];
    return { held: true, mode, limit: mode === 'permit' ? (lim ?? undefined) : undefined, holders, holder: holders[0], waiting: row.waiting };
  }
}
