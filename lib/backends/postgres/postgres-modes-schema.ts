import { delayOver } from './postgres-delay-schema';
import type { sqlNames } from './postgres-names';

/**
 * The objects of the read and permit modes, appended to the schema (idempotent as the rest):
 * a mode and a limit on queue entries, a table of shared holders, and the functions that grant
 * them. Every function locks the name's row first, as the write functions do, so that all the
 * entries of a name, whatever their modes, are granted one statement at a time in `seq` order.
 *
 * The name's row says who holds: a write entry (its owner), nobody (NULL), or shared holders
 * ('' , listed in the holders table); its `expires_at` is then the latest of their leases, so a
 * write waiter takes over exactly when the last of them has run out.
 */
export function modesDdl(n: ReturnType<typeof sqlNames>): string {
  const ms = (value: string) => `${value} * interval '1 millisecond'`;
  const epochMs = (value: string) => `extract(epoch from ${value}) * 1000`;
  const notifyHold = (w: string) => `PERFORM pg_notify(${w}.channel, ${w}.owner || ' ' || ${n.hold}(p_name, ${w}.owner, ${w}.mode, ${w}.lim, ${w}.ttl_ms, t) || ' ' || ${epochMs('t')});`;
  return `
-- Read and permit entries. mode NULL: a write entry; lim: a permit's semaphore limit.
-- (Added only when missing, so an existing queue table is not locked at every start.)
DO $$ BEGIN
  IF NOT EXISTS (SELECT FROM pg_attribute WHERE attrelid = '${n.queue.replace(/'/g, "''")}'::regclass AND attname = 'mode' AND NOT attisdropped) THEN
    ALTER TABLE ${n.queue} ADD COLUMN IF NOT EXISTS mode text, ADD COLUMN IF NOT EXISTS lim integer;
  END IF;
END $$;

-- The read or permit entries that hold each name, each with a lease of its own and its token.
CREATE TABLE IF NOT EXISTS ${n.holders} (
  name text NOT NULL,
  owner text NOT NULL,
  mode text NOT NULL,
  lim integer,
  fence bigint NOT NULL,
  granted_at timestamptz NOT NULL,
  expires_at timestamptz NOT NULL,
  PRIMARY KEY (name, owner)
);

-- A shared holder's row with a new token; the name's row keeps the latest lease end.
CREATE OR REPLACE FUNCTION ${n.hold}(p_name text, p_owner text, p_mode text, p_lim integer, p_ttl_ms integer, t timestamptz) RETURNS bigint
LANGUAGE plpgsql AS $$
DECLARE
  granted bigint := nextval(${n.fenceLiteral});
BEGIN
  INSERT INTO ${n.holders} (name, owner, mode, lim, fence, granted_at, expires_at) VALUES (p_name, p_owner, p_mode, p_lim, granted, t, t + ${ms('p_ttl_ms')})
    ON CONFLICT (name, owner) DO UPDATE SET mode = EXCLUDED.mode, lim = EXCLUDED.lim, fence = EXCLUDED.fence, granted_at = EXCLUDED.granted_at, expires_at = EXCLUDED.expires_at;
  UPDATE ${n.locks} SET expires_at = greatest(expires_at, t + ${ms('p_ttl_ms')}) WHERE name = p_name;
  RETURN granted;
END $$;

-- Shared holders hold the name: grants, in seq order, every live waiter that may go, and stops at
-- the first that may not (a writer, or a permit with limit entries ahead), so no entry passes
-- another. Each grant is notified on its process's channel.
CREATE OR REPLACE FUNCTION ${n.admit}(p_name text, t timestamptz) RETURNS void
LANGUAGE plpgsql AS $$
DECLARE
  ahead integer;
  w ${n.queue}%ROWTYPE;
BEGIN
  SELECT count(*) INTO ahead FROM ${n.holders} WHERE name = p_name AND expires_at > t;
  FOR w IN SELECT * FROM ${n.queue} WHERE name = p_name AND alive_until > t ORDER BY seq LOOP
    EXIT WHEN w.mode IS NULL OR (w.mode = 'permit' AND ahead >= w.lim);
    DELETE FROM ${n.queue} WHERE seq = w.seq;
    ${notifyHold('w')}
    ahead := ahead + 1;
  END LOOP;
END $$;

-- Shared holders held the name (owner ''): drops the ended leases, then grants who may go now,
-- or hands the name to the first waiter once no holder is left, or frees it.
CREATE OR REPLACE FUNCTION ${n.settle}(p_name text, t timestamptz) RETURNS void
LANGUAGE plpgsql AS $$
BEGIN
  DELETE FROM ${n.holders} WHERE name = p_name AND expires_at <= t;
  IF EXISTS (SELECT FROM ${n.holders} WHERE name = p_name) THEN
    PERFORM ${n.admit}(p_name, t);
    UPDATE ${n.locks} SET expires_at = (SELECT max(expires_at) FROM ${n.holders} WHERE name = p_name) WHERE name = p_name;
  ELSIF ${n.grantNext}(p_name, t) IS NULL THEN
    DELETE FROM ${n.queue} WHERE name = p_name;
    UPDATE ${n.locks} SET owner = NULL, expires_at = t, contended = false WHERE name = p_name;
  END IF;
END $$;

-- Take a read or permit entry of the name if it may go now, else queue it (p_queue) at the tail.
-- Called again by a waiting process (its safety net), it refreshes the entry and grants what the
-- end of a lease let go. other_limit: a permit of the name, held or queued, has another limit
-- (nothing was done). left_ms: until the lease whose end can next let this entry go.
CREATE OR REPLACE FUNCTION ${n.acquireShared}(p_name text, p_owner text, p_channel text, p_mode text, p_lim integer, p_ttl_ms integer, p_alive_ms integer, p_queue boolean,
  OUT granted_fence bigint, OUT left_ms double precision, OUT server_ms double precision, OUT other_limit integer)
LANGUAGE plpgsql AS $$
DECLARE
  held ${n.locks}%ROWTYPE;
  mine ${n.holders}%ROWTYPE;
  t timestamptz;
BEGIN
  LOOP
    SELECT * INTO held FROM ${n.locks} WHERE name = p_name FOR UPDATE;
    EXIT WHEN FOUND;
    INSERT INTO ${n.locks} (name, owner, fence, expires_at) VALUES (p_name, NULL, 0, clock_timestamp()) ON CONFLICT (name) DO NOTHING;
  END LOOP;
  t := clock_timestamp();
  server_ms := ${epochMs('t')};
  IF p_mode = 'permit' THEN
    SELECT lim INTO other_limit FROM ${n.holders} WHERE name = p_name AND lim <> p_lim AND expires_at > t LIMIT 1;
    IF other_limit IS NULL THEN
      SELECT lim INTO other_limit FROM ${n.queue} WHERE name = p_name AND lim <> p_lim AND alive_until > t LIMIT 1;
    END IF;
    IF other_limit IS NOT NULL THEN
      RETURN;
    END IF;
  END IF;
  IF held.owner = '' THEN
    PERFORM ${n.settle}(p_name, t);
  ELSIF held.owner IS NOT NULL AND ${delayOver('held', 't')} THEN
    -- A write holder's lease ended (and its lock-delay): the next waiter gets the name, or nobody holds it.
    IF ${n.grantNext}(p_name, t) IS NULL THEN
      DELETE FROM ${n.queue} WHERE name = p_name;
      UPDATE ${n.locks} SET owner = NULL WHERE name = p_name;
    END IF;
  END IF;
  SELECT * INTO held FROM ${n.locks} WHERE name = p_name;
  SELECT * INTO mine FROM ${n.holders} WHERE name = p_name AND owner = p_owner AND expires_at > t;
  IF FOUND THEN
    granted_fence := mine.fence;
    left_ms := ${epochMs('mine.expires_at')} - server_ms;
    RETURN;
  END IF;
  UPDATE ${n.queue} SET alive_until = t + ${ms('p_alive_ms')} WHERE owner = p_owner AND name = p_name;
  IF NOT FOUND THEN
    -- Free (nobody waits then), or shared holders with room and nobody waiting: it goes now.
    IF held.owner IS NULL OR (held.owner = '' AND NOT EXISTS (SELECT FROM ${n.queue} WHERE name = p_name AND alive_until > t)
        AND (p_mode = 'read' OR (SELECT count(*) FROM ${n.holders} WHERE name = p_name AND expires_at > t) < p_lim)) THEN
      IF held.owner IS NULL THEN
        DELETE FROM ${n.holders} WHERE name = p_name;
        UPDATE ${n.locks} SET owner = '', expires_at = t, contended = false, delay_ms = 0 WHERE name = p_name;
      END IF;
      granted_fence := ${n.hold}(p_name, p_owner, p_mode, p_lim, p_ttl_ms, t);
      left_ms := p_ttl_ms;
      RETURN;
    END IF;
    IF p_queue THEN
      INSERT INTO ${n.queue} (name, owner, channel, ttl_ms, alive_until, mode, lim) VALUES (p_name, p_owner, p_channel, p_ttl_ms, t + ${ms('p_alive_ms')}, p_mode, p_lim);
      UPDATE ${n.locks} SET contended = true WHERE name = p_name AND NOT contended;
    END IF;
  END IF;
  IF held.owner = '' AND p_mode = 'permit' THEN
    left_ms := ${epochMs(`(SELECT min(expires_at) FROM ${n.holders} WHERE name = p_name AND expires_at > t)`)} - server_ms;
  ELSE
    left_ms := ${epochMs(`held.expires_at + CASE WHEN held.owner <> '' AND held.expires_at <= t THEN ${ms('held.delay_ms')} ELSE interval '0' END`)} - server_ms;
  END IF;
END $$;

-- Let go of a read or permit entry, owner-checked and idempotent, held or queued; what its
-- leaving lets go is granted in this same statement.
CREATE OR REPLACE FUNCTION ${n.releaseShared}(p_name text, p_owner text) RETURNS void
LANGUAGE plpgsql AS $$
DECLARE
  current_owner text;
  removed boolean;
BEGIN
  SELECT owner INTO current_owner FROM ${n.locks} WHERE name = p_name FOR UPDATE;
  DELETE FROM ${n.holders} WHERE name = p_name AND owner = p_owner;
  removed := FOUND;
  DELETE FROM ${n.queue} WHERE name = p_name AND owner = p_owner;
  IF (removed OR FOUND) AND current_owner = '' THEN
    PERFORM ${n.settle}(p_name, clock_timestamp());
  END IF;
END $$;

-- Extends a shared holder's running lease, owner- and fence-checked; NULL when it is not ours.
CREATE OR REPLACE FUNCTION ${n.renewShared}(p_name text, p_owner text, p_ttl_ms integer, p_fence bigint) RETURNS double precision
LANGUAGE plpgsql AS $$
DECLARE
  t timestamptz;
BEGIN
  PERFORM 1 FROM ${n.locks} WHERE name = p_name AND owner = '' FOR UPDATE;
  IF NOT FOUND THEN
    RETURN NULL;
  END IF;
  t := clock_timestamp();
  UPDATE ${n.holders} SET expires_at = t + ${ms('p_ttl_ms')} WHERE name = p_name AND owner = p_owner AND fence = p_fence AND expires_at > t;
  IF NOT FOUND THEN
    RETURN NULL;
  END IF;
  UPDATE ${n.locks} SET expires_at = greatest(expires_at, t + ${ms('p_ttl_ms')}) WHERE name = p_name;
  RETURN ${epochMs('t')};
END $$;

-- The operator's escape hatch: removes every current holder of the name (a writer through the
-- release function) and grants the waiters that may go then. True when a holder was removed.
CREATE OR REPLACE FUNCTION ${n.forceRelease}(p_name text) RETURNS boolean
LANGUAGE plpgsql AS $$
DECLARE
  held ${n.locks}%ROWTYPE;
  t timestamptz;
  removed boolean;
BEGIN
  SELECT * INTO held FROM ${n.locks} WHERE name = p_name FOR UPDATE;
  t := clock_timestamp();
  IF NOT FOUND OR held.owner IS NULL OR held.expires_at <= t THEN
    RETURN false;
  END IF;
  IF held.owner <> '' THEN
    PERFORM ${n.release}(p_name, held.owner);
    RETURN true;
  END IF;
  DELETE FROM ${n.holders} WHERE name = p_name AND expires_at > t;
  removed := FOUND;
  PERFORM ${n.settle}(p_name, t);
  RETURN removed;
END $$;
`;
}
