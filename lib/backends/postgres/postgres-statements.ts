import { sqlNames, type PostgresNames } from './postgres-names';

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
 * Makes the statement's transaction commit durably (`synchronous_commit = on` for it alone),
 * whatever the server's or the connection's default: a fencing token handed out, a lease
 * granted or renewed, is on disk before its caller hears of it, so a crash of the server never
 * hands the same token out again or shortens a lease its holder counts on. Transaction-local
 * (`set_config(..., true)`), so it leaves nothing behind on a pooled connection (PgBouncer in
 * transaction mode). `DURABLE_CHECK` refers to it as a one-time filter, which the executor
 * evaluates before anything else runs, whichever branch of the statement then writes.
 */
export const DURABLE_CTE = `durable AS MATERIALIZED (SELECT set_config('synchronous_commit', 'on', true))`;
export const DURABLE_CHECK = 'EXISTS (SELECT FROM durable)';

/**
 * The statements the backend sends, each one round trip: the functions of postgres-schema.ts for
 * anything that touches the queue, a plain owner-checked UPDATE for a renewal.
 */
export function statements(names: PostgresNames) {
  const n = sqlNames(names);
  return {
    /**
     * $1 name, $2 entry, $3 channel, $4 ttl ms, $5 alive ms, $6 queue when busy, $7 lock-delay ms (0: none). A free name's row
     * is taken by a plain UPDATE (the common case, and cheaper than the function); otherwise, in
     * the same statement, the function takes or queues. The UPDATE reads only the row's own
     * columns, which PostgreSQL checks again after waiting for the row's lock.
     */
    acquire:
      `WITH ${DURABLE_CTE}, fast AS (UPDATE ${n.locks} SET owner = $2::text, fence = nextval(${n.fenceLiteral}), expires_at = clock_timestamp() + $4::integer * interval '1 millisecond', delay_ms = $7::integer ` +
      `WHERE name = $1::text AND owner IS NULL AND ${DURABLE_CHECK} RETURNING fence, expires_at) ` +
      `SELECT fence::text AS granted_fence, $4::integer::float8 AS left_ms, extract(epoch from expires_at) * 1000 - $4::integer AS server_ms FROM fast ` +
      `UNION ALL SELECT a.granted_fence::text, a.left_ms, a.server_ms FROM ${n.acquire}($1::text, $2::text, $3::text, $4::integer, $5::integer, $6::boolean, $7::integer) a ` +
      `WHERE NOT EXISTS (SELECT FROM fast)`,
    /**
     * The safety net for every waiting entry of the process at once: $1 names, $2 entries, $3 ttls,
     * $4 alive ms (arrays, sorted by name so that two processes lock rows in one order), $5 channel, $6 lock-delays.
     */
    check:
      `WITH ${DURABLE_CTE} SELECT e.owner, a.granted_fence::text, a.left_ms, a.server_ms ` +
      `FROM unnest($1::text[], $2::text[], $3::int[], $4::int[], $6::int[]) WITH ORDINALITY AS e(name, owner, ttl_ms, alive_ms, delay_ms, i) ` +
      `CROSS JOIN LATERAL ${n.acquire}(e.name, e.owner, $5, e.ttl_ms, e.alive_ms, true, e.delay_ms) a WHERE ${DURABLE_CHECK} ORDER BY e.i`,
    /**
     * Queues many entries at once (acquire with p_queue for each row): $1 names, $2 entries, $3
     * ttls, $4 alive ms (arrays, sorted by name like check's), $5 channel, $6 lock-delays.
     */
    queueMany:
      `WITH ${DURABLE_CTE} SELECT a.granted_fence::text, a.left_ms, a.server_ms ` +
      `FROM unnest($1::text[], $2::text[], $3::int[], $4::int[], $6::int[]) WITH ORDINALITY AS e(name, owner, ttl_ms, alive_ms, delay_ms, i) ` +
      `CROSS JOIN LATERAL ${n.acquire}(e.name, e.owner, $5, e.ttl_ms, e.alive_ms, true, e.delay_ms) a WHERE ${DURABLE_CHECK} ORDER BY e.i`,
    /**
     * $1 name, $2 entry: frees the name when nobody queued for it (a plain UPDATE of its row:
     * `contended` is set in the same transaction as any queuing, under the row's lock, so the
     * UPDATE, which checks it again after waiting for that lock, never frees a name with a waiter);
     * otherwise the function hands the lock on, or takes a waiter's entry out of the queue.
     */
    release:
      `WITH ${DURABLE_CTE}, fast AS (UPDATE ${n.locks} SET owner = NULL, expires_at = clock_timestamp() WHERE name = $1::text AND owner = $2::text AND NOT contended ` +
      // A lease that ran out with a lock-delay is the releaser's no longer: the delay runs its course.
      `AND (delay_ms = 0 OR expires_at > clock_timestamp()) AND ${DURABLE_CHECK} RETURNING 1) ` +
      `SELECT NULL::text AS handed_to FROM fast UNION ALL SELECT ${n.release}($1::text, $2::text) WHERE NOT EXISTS (SELECT FROM fast)`,
    /** Hands each entry's lock on, or takes the entry out of the queue: $1 names, $2 entries (arrays, sorted by name). */
    releaseMany:
      `WITH ${DURABLE_CTE} SELECT ${n.release}(e.name, e.owner) AS handed_to ` +
      `FROM unnest($1::text[], $2::text[]) WITH ORDINALITY AS e(name, owner, i) WHERE ${DURABLE_CHECK} ORDER BY e.i`,
    /**
     * $1 ms: deletes the rows of names free (nobody holds, nobody waits) for that long. A release
     * keeps its row for the next taker; this keeps the table from growing with every name ever used.
     */
    sweep: `DELETE FROM ${n.locks} WHERE owner IS NULL AND expires_at < clock_timestamp() - $1::integer * interval '1 millisecond'`,
    /** $1 name, $2 entry, $3 ttl ms, $4 fence: extends a lease that is still ours and still running. */
    renew:
      `WITH ${DURABLE_CTE} UPDATE ${n.locks} SET expires_at = clock_timestamp() + $3 * interval '1 millisecond' ` +
      `WHERE name = $1 AND owner = $2 AND fence = $4 AND expires_at > clock_timestamp() AND ${DURABLE_CHECK} ` +
      `RETURNING extract(epoch from clock_timestamp()) * 1000 AS server_ms`,
  };
}

export type Statements = ReturnType<typeof statements>;

/** What `acquire` and `queueMany` take of a write entry. */
export interface WriteEntry {
  readonly key: string;
  readonly entry: string;
  readonly ttlMs: number;
  readonly aliveMs: number;
  readonly lockDelayMs: number;
}

/** `acquire`'s values, in its parameters' order: `queue` when busy, else a try. */
export function acquireValues(write: WriteEntry, channel: string, queue: boolean): unknown[] {
  return [write.key, write.entry, channel, write.ttlMs, write.aliveMs, queue, Math.ceil(write.lockDelayMs)];
}

/** `queueMany`'s values for entries sorted by name. */
export function queueManyValues(sorted: readonly WriteEntry[], channel: string): unknown[] {
  return [
    sorted.map((write) => write.key),
    sorted.map((write) => write.entry),
    sorted.map((write) => write.ttlMs),
    sorted.map((write) => write.aliveMs),
    channel,
    sorted.map((write) => Math.ceil(write.lockDelayMs)),
  ];
}
