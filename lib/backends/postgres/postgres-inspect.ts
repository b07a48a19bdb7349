import { batchToken } from '../../queue/batch';
import type { LockInspection } from '../lock-backend.interface';
import type { PostgresCalls } from './postgres-calls';
import { CLIENT_ID_LENGTH } from './postgres-holder-record';
import { sqlNames, type PostgresNames } from './postgres-names';
import { DURABLE_CHECK, DURABLE_CTE } from './postgres-statements';

interface InspectRow {
  owner: string | null;
  /** The holder's process's description (postgres-holder-record.ts); null when it has none or it is not read. */
  description?: string | null;
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
  description?: string | null;
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
  /** Without and with the holders' descriptions (a schema made by an older version has no clients table). */
  private readonly inspectSql: string;
  private readonly describedInspectSql: string;
  private readonly forceReleaseSql: string;

  constructor(
    private readonly calls: PostgresCalls,
    names: PostgresNames,
    /** Whether the clients table exists (PostgresHolderRecord.tablePresent). */
    private readonly descriptionsKept: () => Promise<boolean>,
  ) {
    const n = sqlNames(names);
    const sinceMs = (value: string) => `extract(epoch from (${value})) * 1000`;
    // An entry's owner starts with its client's id: the description of the holder's process, in the same statement.
    const description = (owner: string) => `(SELECT c.description FROM ${n.clients} c WHERE c.client_id = left(${owner}, ${CLIENT_ID_LENGTH}) AND c.expires_at > clock_timestamp())`;
    const inspectSql = (described: boolean) =>
      `SELECT l.owner, l.fence::text AS fence, ${sinceMs('l.expires_at - clock_timestamp()')} AS expires_in_ms, ` +
      (described ? `${description('l.owner')} AS description, ` : '') +
      `(SELECT count(*) FROM ${n.queue} q WHERE q.name = $1 AND q.alive_until > clock_timestamp())::int AS waiting, ` +
      `(SELECT json_agg(json_build_object('owner', h.owner, 'mode', h.mode, 'lim', h.lim, 'fence', h.fence::text, ` +
      `'held_ms', ${sinceMs('clock_timestamp() - h.granted_at')}, 'expires_in_ms', ${sinceMs('h.expires_at - clock_timestamp()')}` +
      (described ? `, 'description', ${description('h.owner')}` : '') +
      `) ORDER BY h.fence) ` +
      `FROM ${n.holders} h WHERE l.owner = '' AND h.name = $1 AND h.expires_at > clock_timestamp()) AS holders ` +
      `FROM (VALUES (1)) AS one(x) LEFT JOIN ${n.locks} l ON l.name = $1 AND l.expires_at > clock_timestamp()`;
    this.inspectSql = inspectSql(false);
    this.describedInspectSql = inspectSql(true);
    // Every holder of any mode: a writer through the release function (its next waiter is granted and notified, as at any release).
    this.forceReleaseSql = `WITH ${DURABLE_CTE} SELECT ${n.forceRelease}($1::text) AS removed WHERE ${DURABLE_CHECK}`;
  }

  async inspect(key: string): Promise<LockInspection> {
    const sql = (await this.descriptionsKept()) ? this.describedInspectSql : this.inspectSql;
    const [row] = await this.calls.query<InspectRow>('inspect a lock', sql, [key]);
    if (row.owner === '') return this.sharedInspection(row);
    if (row.owner === null || row.fence === null) return { held: false, waiting: row.waiting };
    const expiresInMs = Math.max(0, Number(row.expires_in_ms));
    const holder = { owner: row.owner, fencingToken: batchToken(BigInt(row.fence), 0n), expiresInMs, ...described(row.description) };
    return { held: true, mode: 'write', holder, waiting: row.waiting };
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
      ...described(holder.description),
    }));
    const { mode, lim } = rows[0];
    return { held: true, mode, limit: mode === 'permit' ? (lim ?? undefined) : undefined, holders, holder: holders[0], waiting: row.waiting };
  }
}

/** A holder's `description` field, present only when its process recorded one. */
function described(description: string | null | undefined): { description?: string } {
  return description ? { description } : {};
}
