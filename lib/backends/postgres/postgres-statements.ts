import { sqlNames, type PostgresNames } from './postgres-schema';

/** What the acquire function answers: a fence when the entry holds the lock, else what is left of the holder's lease. */
export interface AcquireRow {
  granted_fence: string | null;
  left_ms: number;
  server_ms: number;
}

export interface CheckRow extends AcquireRow {
  owner: string;
}

/**
 * The statements the backend sends, each one round trip: the functions of postgres-schema.ts for
 * anything that touches the queue, a plain owner-checked UPDATE for a renewal.
 */
export function statements(names: PostgresNames) {
  const n = sqlNames(names);
  return {
    /** $1 name, $2 entry, $3 channel, $4 ttl ms, $5 alive ms, $6 queue when busy. */
    acquire: `SELECT granted_fence::text, left_ms, server_ms FROM ${n.acquire}($1, $2, $3, $4, $5, $6)`,
    /**
     * The safety net for every waiting entry of the process at once: $1 names, $2 entries, $3 ttls,
     * $4 alive ms (arrays, sorted by name so that two processes lock rows in one order), $5 channel.
     */
    check:
      `SELECT e.owner, a.granted_fence::text, a.left_ms, a.server_ms ` +
      `FROM unnest($1::text[], $2::text[], $3::int[], $4::int[]) WITH ORDINALITY AS e(name, owner, ttl_ms, alive_ms, i) ` +
      `CROSS JOIN LATERAL ${n.acquire}(e.name, e.owner, $5, e.ttl_ms, e.alive_ms, true) a ORDER BY e.i`,
    /**
     * Queues many entries at once (acquire with p_queue for each row): $1 names, $2 entries, $3
     * ttls, $4 alive ms (arrays, sorted by name like check's), $5 channel.
     */
    queueMany:
      `SELECT a.granted_fence::text, a.left_ms, a.server_ms ` +
      `FROM unnest($1::text[], $2::text[], $3::int[], $4::int[]) WITH ORDINALITY AS e(name, owner, ttl_ms, alive_ms, i) ` +
      `CROSS JOIN LATERAL ${n.acquire}(e.name, e.owner, $5, e.ttl_ms, e.alive_ms, true) a ORDER BY e.i`,
    /** Hands each entry's lock on, or takes the entry out of the queue: $1 names, $2 entries (arrays, sorted by name). */
    releaseMany:
      `SELECT ${n.release}(e.name, e.owner) AS handed_to ` +
      `FROM unnest($1::text[], $2::text[]) WITH ORDINALITY AS e(name, owner, i) ORDER BY e.i`,
    /** $1 name, $2 entry, $3 ttl ms, $4 fence: extends a lease that is still ours and still running. */
    renew:
      `UPDATE ${n.locks} SET expires_at = clock_timestamp() + $3 * interval '1 millisecond' ` +
      `WHERE name = $1 AND owner = $2 AND fence = $4 AND expires_at > clock_timestamp() ` +
      `RETURNING extract(epoch from clock_timestamp()) * 1000 AS server_ms`,
  };
}

export type Statements = ReturnType<typeof statements>;
