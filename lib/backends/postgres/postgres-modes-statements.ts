import { sqlNames, type PostgresNames } from './postgres-names';
import { DURABLE_CHECK, DURABLE_CTE, type AcquireRow } from './postgres-statements';

/** What the modes' acquire function answers: as a write entry's row, and a permit's conflicting limit. */
export interface ModeAcquireRow extends AcquireRow {
  other_limit: number | null;
}

/** The statements of read and permit entries, each one round trip through the modes' functions (postgres-modes-schema.ts). */
export function modeStatements(names: PostgresNames) {
  const n = sqlNames(names);
  const answer = 'a.granted_fence::text, a.left_ms, a.server_ms, a.other_limit';
  return {
    /** $1 name, $2 entry, $3 channel, $4 mode, $5 limit, $6 ttl ms, $7 alive ms, $8 queue when it may not go. */
    acquire:
      `WITH ${DURABLE_CTE} SELECT ${answer} ` +
      `FROM ${n.acquireShared}($1::text, $2::text, $3::text, $4::text, $5::integer, $6::integer, $7::integer, $8::boolean) a WHERE ${DURABLE_CHECK}`,
    /** The safety net of the process's waiting read and permit entries: $1 names, $2 entries, $3 modes, $4 limits, $5 ttls, $6 alive ms (sorted by name), $7 channel. */
    check:
      `WITH ${DURABLE_CTE} SELECT ${answer} ` +
      `FROM unnest($1::text[], $2::text[], $3::text[], $4::int[], $5::int[], $6::int[]) WITH ORDINALITY AS e(name, owner, mode, lim, ttl_ms, alive_ms, i) ` +
      `CROSS JOIN LATERAL ${n.acquireShared}(e.name, e.owner, $7, e.mode, e.lim, e.ttl_ms, e.alive_ms, true) a WHERE ${DURABLE_CHECK} ORDER BY e.i`,
    /** $1 name, $2 entry: leaves the holders or the queue, and grants what that lets go. */
    release: `WITH ${DURABLE_CTE} SELECT ${n.releaseShared}($1::text, $2::text) WHERE ${DURABLE_CHECK}`,
    /** $1 name, $2 entry, $3 ttl ms, $4 fence: server_ms, NULL when the lease is not ours. */
    renew: `WITH ${DURABLE_CTE} SELECT ${n.renewShared}($1::text, $2::text, $3::integer, $4::bigint) AS server_ms WHERE ${DURABLE_CHECK}`,
    /** $1 ms: deletes holder rows whose lease ended that long ago (a crashed holder on a name nobody used since). */
    sweep: `DELETE FROM ${n.holders} WHERE expires_at < clock_timestamp() - $1::integer * interval '1 millisecond'`,
  };
}

export type ModeStatements = ReturnType<typeof modeStatements>;
