import type { sqlNames } from './postgres-names';

/**
 * Lock-delay (README, "Lock-delay"): the name's row keeps its holder's `delay_ms`, and a queued
 * entry its own, given to the row when it is granted. A row whose lease ended without a release
 * (owner still set, `expires_at` past) is granted to nobody until `expires_at + delay_ms` on the
 * database's clock; a release frees the row (owner NULL) and no delay applies. Every grant writes
 * the column in the update it makes anyway, so a name without a delay costs no statement more.
 * Added only when missing, so an existing table is not locked at every start.
 */
export function delayDdl(n: ReturnType<typeof sqlNames>): string {
  const column = (table: string) => `
  IF NOT EXISTS (SELECT FROM pg_attribute WHERE attrelid = '${table.replace(/'/g, "''")}'::regclass AND attname = 'delay_ms' AND NOT attisdropped) THEN
    ALTER TABLE ${table} ADD COLUMN IF NOT EXISTS delay_ms integer NOT NULL DEFAULT 0;
  END IF;`;
  return `
-- Lock-delay: a holder's (on the name's row) and a waiting entry's (on its queue row), in ms; 0: none.
DO $$ BEGIN${column(n.locks)}${column(n.queue)}
END $$;
`;
}

/** SQL for "the lease of `row` ended, and its lock-delay with it, by `t`": the row may be granted to another. */
export const delayOver = (row: string, t: string) => `${row}.expires_at + ${row}.delay_ms * interval '1 millisecond' <= ${t}`;
