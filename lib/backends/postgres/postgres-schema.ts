import { delayDdl, delayOver } from './postgres-delay-schema';
import { modesDdl } from './postgres-modes-schema';
import { DEFAULT_NAMES, sqlNames, type PostgresNames } from './postgres-names';

/**
 * The whole schema, idempotent: `sql/postgres-locks.sql` is this text for the default names (a
 * test keeps them equal), for teams that run DDL through their migrations (`createSchema: false`).
 *
 * Why functions and not bare statements for queueing: under READ COMMITTED a statement reads the
 * queue as of its start, so a release that waits for a queuing statement's row lock would not see
 * the waiter that statement just added and could free the lock under it (a lost wake-up). Inside a
 * function each statement takes a fresh snapshot after the row lock is ours. Each call is still
 * one statement and one round trip.
 */
export function schemaDdl(names: PostgresNames): string {
  const n = sqlNames(names);
  const ms = (value: string) => `${value} * interval '1 millisecond'`;
  const epochMs = (value: string) => `extract(epoch from ${value}) * 1000`;
  return `-- nest-distributed-lock: the PostgreSQL backend's tables and functions (schema "${names.schema}", table "${names.table}").
-- Idempotent: safe to run again. See docs/postgres.md.

CREATE SCHEMA IF NOT EXISTS "${names.schema}";

-- One row per lock name: its holder (an entry of the queue below, or a caller that took it
-- outright; '' while read or permit entries hold it, listed in the holders table), its fencing token and the end of its lease on the database's clock. owner NULL: free,
-- and nobody waits. contended: an entry was queued since the name was last free with nobody
-- waiting (false: the queue of the name is empty). A release keeps the row: an update in place of
-- columns no index covers (a HOT update, hence the room left in each page); rows free for a while
-- are swept.
CREATE TABLE IF NOT EXISTS ${n.locks} (
  name text PRIMARY KEY,
  owner text,
  fence bigint NOT NULL,
  expires_at timestamptz NOT NULL,
  contended boolean NOT NULL DEFAULT false
) WITH (fillfactor = 50);

-- The waiters of each name, first come first served (seq). A waiter's process refreshes
-- alive_until while it waits; one that stops (a dead process) is skipped.
CREATE TABLE IF NOT EXISTS ${n.queue} (
  seq bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
  name text NOT NULL,
  owner text NOT NULL,
  channel text NOT NULL,
  ttl_ms integer NOT NULL,
  alive_until timestamptz NOT NULL
);
CREATE INDEX IF NOT EXISTS "${names.table}_queue_by_name" ON ${n.queue} (name, seq);
CREATE INDEX IF NOT EXISTS "${names.table}_queue_by_owner" ON ${n.queue} (owner);
${delayDdl(n)}
-- Fencing tokens: a sequence never goes back, not even after a crash and restart.
CREATE SEQUENCE IF NOT EXISTS ${n.fence};

-- One row per running backend client (a process): its module option holderDescription, which
-- inspect shows with the locks its entries hold (an entry's owner starts with the client id).
-- Written at start and refreshed while it runs, never per lock; a row past expires_at is a
-- process gone, and the live ones delete such rows as they refresh theirs.
CREATE TABLE IF NOT EXISTS ${n.clients} (
  client_id text PRIMARY KEY,
  description text NOT NULL,
  expires_at timestamptz NOT NULL
);

-- The first live waiter of the name gets the lock (the caller holds the name's row lock, and nothing
-- holds the name): a new token, a lease of its ttl, and one notification on its process's channel;
-- a read or permit entry first is granted with the entries behind it that may go (admit). NULL: nobody waits.
CREATE OR REPLACE FUNCTION ${n.grantNext}(p_name text, t timestamptz) RETURNS text
LANGUAGE plpgsql AS $$
DECLARE
  next_waiter ${n.queue}%ROWTYPE;
  granted bigint;
BEGIN
  DELETE FROM ${n.queue} WHERE seq = (
    SELECT seq FROM ${n.queue} WHERE name = p_name AND alive_until > t ORDER BY seq LIMIT 1
  ) RETURNING * INTO next_waiter;
  IF NOT FOUND THEN
    RETURN NULL;
  END IF;
  IF next_waiter.mode IS NOT NULL THEN
    -- A read or permit entry first (nothing holds): the row stands for shared holders from now on.
    DELETE FROM ${n.holders} WHERE name = p_name;
    UPDATE ${n.locks} SET owner = '', expires_at = t, contended = true, delay_ms = 0 WHERE name = p_name;
    PERFORM pg_notify(next_waiter.channel, next_waiter.owner || ' ' || ${n.hold}(p_name, next_waiter.owner, next_waiter.mode, next_waiter.lim, next_waiter.ttl_ms, t) || ' ' || ${epochMs('t')});
    PERFORM ${n.admit}(p_name, t);
    RETURN next_waiter.owner;
  END IF;
  UPDATE ${n.locks} SET owner = next_waiter.owner, fence = nextval(${n.fenceLiteral}), expires_at = t + ${ms('next_waiter.ttl_ms')}, delay_ms = next_waiter.delay_ms
    WHERE name = p_name RETURNING fence INTO granted;
  PERFORM pg_notify(next_waiter.channel, next_waiter.owner || ' ' || granted || ' ' || ${epochMs('t')});
  RETURN next_waiter.owner;
END $$;

-- Take the lock if it is free (or its lease ended) and nobody waits; else queue (p_queue) behind the others. Called
-- again by a waiting process (its safety net), it refreshes the entry, takes a lock its entry was
-- granted or that expired with nobody ahead, and queues anew an entry that was dropped.
-- granted_fence is NULL while waiting; left_ms is what is left of the holder's lease (and of its
-- lock-delay once the lease ran out unreleased). p_delay_ms: the entry's lock-delay, 0 for none.
CREATE OR REPLACE FUNCTION ${n.acquire}(p_name text, p_owner text, p_channel text, p_ttl_ms integer, p_alive_ms integer, p_queue boolean, p_delay_ms integer,
  OUT granted_fence bigint, OUT left_ms double precision, OUT server_ms double precision)
LANGUAGE plpgsql AS $$
DECLARE
  held ${n.locks}%ROWTYPE;
  t timestamptz;
BEGIN
  -- The name is free and nobody waits: one HOT update. (An entry is queued only under an owned
  -- row, and a release frees the row only when nobody waits, so owner NULL says nobody does; the
  -- row's own column is checked again after any wait for its lock.)
  t := clock_timestamp();
  UPDATE ${n.locks} SET owner = p_owner, fence = nextval(${n.fenceLiteral}), expires_at = t + ${ms('p_ttl_ms')}, delay_ms = p_delay_ms
    WHERE name = p_name AND owner IS NULL RETURNING fence INTO granted_fence;
  IF FOUND THEN
    left_ms := p_ttl_ms;
    server_ms := ${epochMs('t')};
    RETURN;
  END IF;
  LOOP
    SELECT * INTO held FROM ${n.locks} WHERE name = p_name FOR UPDATE;
    EXIT WHEN FOUND;
    t := clock_timestamp();
    INSERT INTO ${n.locks} (name, owner, fence, expires_at, delay_ms) VALUES (p_name, p_owner, nextval(${n.fenceLiteral}), t + ${ms('p_ttl_ms')}, p_delay_ms)
      ON CONFLICT (name) DO NOTHING RETURNING fence INTO granted_fence;
    IF FOUND THEN
      left_ms := p_ttl_ms;
      server_ms := ${epochMs('t')};
      RETURN;
    END IF;
  END LOOP;
  t := clock_timestamp();
  server_ms := ${epochMs('t')};
  IF held.owner IS NULL OR ${delayOver('held', 't')} THEN
    IF ${n.grantNext}(p_name, t) IS NULL THEN
      DELETE FROM ${n.queue} WHERE name = p_name;
      UPDATE ${n.locks} SET owner = p_owner, fence = nextval(${n.fenceLiteral}), expires_at = t + ${ms('p_ttl_ms')}, contended = false, delay_ms = p_delay_ms
        WHERE name = p_name RETURNING * INTO held;
    ELSE
      SELECT * INTO held FROM ${n.locks} WHERE name = p_name;
    END IF;
  END IF;
  left_ms := ${epochMs(`held.expires_at + CASE WHEN held.expires_at <= t THEN ${ms('held.delay_ms')} ELSE interval '0' END`)} - server_ms;
  IF held.owner = p_owner THEN
    granted_fence := held.fence;
    RETURN;
  END IF;
  UPDATE ${n.queue} SET alive_until = t + ${ms('p_alive_ms')} WHERE owner = p_owner AND name = p_name;
  IF NOT FOUND AND p_queue THEN
    INSERT INTO ${n.queue} (name, owner, channel, ttl_ms, alive_until, delay_ms) VALUES (p_name, p_owner, p_channel, p_ttl_ms, t + ${ms('p_alive_ms')}, p_delay_ms);
    -- The release's single UPDATE (which reads only this row) must now leave the hand-off to the function.
    UPDATE ${n.locks} SET contended = true WHERE name = p_name AND NOT contended;
  END IF;
END $$;

-- Let go, owner-checked and idempotent: a holder hands the lock to the next live waiter in this
-- same statement (or frees the name, keeping its row, when nobody waits); a waiter leaves the queue.
-- (Not contended, the release statement frees the row itself and never calls this.)
-- The name's row is locked whoever owns it, and its owner read after that lock: a waiter leaving
-- while a release hands the lock to it waits for the hand-off and then lets go of the lock, where a
-- check of the owner before the lock would see the old holder and strand the lock with the waiter.
CREATE OR REPLACE FUNCTION ${n.release}(p_name text, p_owner text) RETURNS text
LANGUAGE plpgsql AS $$
DECLARE
  current_owner text;
  handed_to text;
BEGIN
  -- A lease that ran out with a lock-delay is its holder's no longer: the delay runs its course.
  SELECT CASE WHEN delay_ms > 0 AND expires_at <= clock_timestamp() THEN NULL ELSE owner END INTO current_owner FROM ${n.locks} WHERE name = p_name FOR UPDATE;
  IF current_owner IS DISTINCT FROM p_owner THEN
    DELETE FROM ${n.queue} WHERE owner = p_owner AND name = p_name;
    -- A writer that leaves from behind shared holders may have held back the entries behind it.
    IF FOUND AND current_owner = '' THEN
      PERFORM ${n.settle}(p_name, clock_timestamp());
    END IF;
    RETURN NULL;
  END IF;
  handed_to := ${n.grantNext}(p_name, clock_timestamp());
  IF handed_to IS NULL THEN
    DELETE FROM ${n.queue} WHERE name = p_name;
    UPDATE ${n.locks} SET owner = NULL, expires_at = clock_timestamp(), contended = false WHERE name = p_name;
  END IF;
  RETURN handed_to;
END $$;
${modesDdl(n)}`;
}

/** The DDL for a migration, for `{ schema, table }` as given to the backend (defaults: public, distributed_locks). */
export function postgresLockSchemaSql(names: Partial<PostgresNames> = {}): string {
  return schemaDdl({ ...DEFAULT_NAMES, ...names });
}
