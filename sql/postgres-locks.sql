-- nest-distributed-lock: the PostgreSQL backend's tables and functions (schema "public", table "distributed_locks").
-- Idempotent: safe to run again. See docs/postgres.md.

CREATE SCHEMA IF NOT EXISTS "public";

-- One row per lock name: its holder (an entry of the queue below, or a caller that took it
-- outright; '' while read or permit entries hold it, listed in the holders table), its fencing token and the end of its lease on the database's clock. owner NULL: free,
-- and nobody waits. contended: an entry was queued since the name was last free with nobody
-- waiting (false: the queue of the name is empty). A release keeps the row: an update in place of
-- columns no index covers (a HOT update, hence the room left in each page); rows free for a while
-- are swept.
CREATE TABLE IF NOT EXISTS "public"."distributed_locks" (
  name text PRIMARY KEY,
  owner text,
  fence bigint NOT NULL,
  expires_at timestamptz NOT NULL,
  contended boolean NOT NULL DEFAULT false
) WITH (fillfactor = 50);

-- The waiters of each name, first come first served (seq). A waiter's process refreshes
-- alive_until while it waits; one that stops (a dead process) is skipped.
CREATE TABLE IF NOT EXISTS "public"."distributed_locks_queue" (
  seq bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
  name text NOT NULL,
  owner text NOT NULL,
  channel text NOT NULL,
  ttl_ms integer NOT NULL,
  alive_until timestamptz NOT NULL
);
CREATE INDEX IF NOT EXISTS "distributed_locks_queue_by_name" ON "public"."distributed_locks_queue" (name, seq);
CREATE INDEX IF NOT EXISTS "distributed_locks_queue_by_owner" ON "public"."distributed_locks_queue" (owner);

-- Lock-delay: a holder's (on the name's row) and a waiting entry's (on its queue row), in ms; 0: none.
DO $$ BEGIN
  IF NOT EXISTS (SELECT FROM pg_attribute WHERE attrelid = '"public"."distributed_locks"'::regclass AND attname = 'delay_ms' AND NOT attisdropped) THEN
    ALTER TABLE "public"."distributed_locks" ADD COLUMN IF NOT EXISTS delay_ms integer NOT NULL DEFAULT 0;
  END IF;
  IF NOT EXISTS (SELECT FROM pg_attribute WHERE attrelid = '"public"."distributed_locks_queue"'::regclass AND attname = 'delay_ms' AND NOT attisdropped) THEN
    ALTER TABLE "public"."distributed_locks_queue" ADD COLUMN IF NOT EXISTS delay_ms integer NOT NULL DEFAULT 0;
  END IF;
END $$;

-- Fencing tokens: a sequence never goes back, not even after a crash and restart.
CREATE SEQUENCE IF NOT EXISTS "public"."distributed_locks_fence";

-- One row per running backend client (a process): its module option holderDescription, which
-- inspect shows with the locks its entries hold (an entry's owner starts with the client id).
-- Written at start and refreshed while it runs, never per lock; a row past expires_at is a
-- process gone, and the live ones delete such rows as they refresh theirs.
CREATE TABLE IF NOT EXISTS "public"."distributed_locks_clients" (
  client_id text PRIMARY KEY,
  description text NOT NULL,
  expires_at timestamptz NOT NULL
);

-- The first live waiter of the name gets the lock (the caller holds the name's row lock, and nothing
-- holds the name): a new token, a lease of its ttl, and one notification on its process's channel;
-- a read or permit entry first is granted with the entries behind it that may go (admit). NULL: nobody waits.
CREATE OR REPLACE FUNCTION "public"."distributed_locks_grant_next"(p_name text, t timestamptz) RETURNS text
LANGUAGE plpgsql AS $$
DECLARE
  next_waiter "public"."distributed_locks_queue"%ROWTYPE;
  granted bigint;
BEGIN
  DELETE FROM "public"."distributed_locks_queue" WHERE seq = (
    SELECT seq FROM "public"."distributed_locks_queue" WHERE name = p_name AND alive_until > t ORDER BY seq LIMIT 1
  ) RETURNING * INTO next_waiter;
  IF NOT FOUND THEN
    RETURN NULL;
  END IF;
  IF next_waiter.mode IS NOT NULL THEN
    -- A read or permit entry first (nothing holds): the row stands for shared holders from now on.
    DELETE FROM "public"."distributed_locks_holders" WHERE name = p_name;
    UPDATE "public"."distributed_locks" SET owner = '', expires_at = t, contended = true, delay_ms = 0 WHERE name = p_name;
    PERFORM pg_notify(next_waiter.channel, next_waiter.owner || ' ' || "public"."distributed_locks_hold"(p_name, next_waiter.owner, next_waiter.mode, next_waiter.lim, next_waiter.ttl_ms, t) || ' ' || extract(epoch from t) * 1000);
    PERFORM "public"."distributed_locks_admit"(p_name, t);
    RETURN next_waiter.owner;
  END IF;
  UPDATE "public"."distributed_locks" SET owner = next_waiter.owner, fence = nextval('"public"."distributed_locks_fence"'), expires_at = t + next_waiter.ttl_ms * interval '1 millisecond', delay_ms = next_waiter.delay_ms
    WHERE name = p_name RETURNING fence INTO granted;
  PERFORM pg_notify(next_waiter.channel, next_waiter.owner || ' ' || granted || ' ' || extract(epoch from t) * 1000);
  RETURN next_waiter.owner;
END $$;

-- Take the lock if it is free (or its lease ended) and nobody waits; else queue (p_queue) behind the others. Called
-- again by a waiting process (its safety net), it refreshes the entry, takes a lock its entry was
-- granted or that expired with nobody ahead, and queues anew an entry that was dropped.
-- granted_fence is NULL while waiting; left_ms is what is left of the holder's lease (and of its
-- lock-delay once the lease ran out unreleased). p_delay_ms: the entry's lock-delay, 0 for none.
CREATE OR REPLACE FUNCTION "public"."distributed_locks_acquire"(p_name text, p_owner text, p_channel text, p_ttl_ms integer, p_alive_ms integer, p_queue boolean, p_delay_ms integer,
  OUT granted_fence bigint, OUT left_ms double precision, OUT server_ms double precision)
LANGUAGE plpgsql AS $$
DECLARE
  held "public"."distributed_locks"%ROWTYPE;
  t timestamptz;
BEGIN
  -- The name is free and nobody waits: one HOT update. (An entry is queued only under an owned
  -- row, and a release frees the row only when nobody waits, so owner NULL says nobody does; the
  -- row's own column is checked again after any wait for its lock.)
  t := clock_timestamp();
  UPDATE "public"."distributed_locks" SET owner = p_owner, fence = nextval('"public"."distributed_locks_fence"'), expires_at = t + p_ttl_ms * interval '1 millisecond', delay_ms = p_delay_ms
    WHERE name = p_name AND owner IS NULL RETURNING fence INTO granted_fence;
  IF FOUND THEN
    left_ms := p_ttl_ms;
    server_ms := extract(epoch from t) * 1000;
    RETURN;
  END IF;
  LOOP
    SELECT * INTO held FROM "public"."distributed_locks" WHERE name = p_name FOR UPDATE;
    EXIT WHEN FOUND;
    t := clock_timestamp();
    INSERT INTO "public"."distributed_locks" (name, owner, fence, expires_at, delay_ms) VALUES (p_name, p_owner, nextval('"public"."distributed_locks_fence"'), t + p_ttl_ms * interval '1 millisecond', p_delay_ms)
      ON CONFLICT (name) DO NOTHING RETURNING fence INTO granted_fence;
    IF FOUND THEN
      left_ms := p_ttl_ms;
      server_ms := extract(epoch from t) * 1000;
      RETURN;
    END IF;
  END LOOP;
  t := clock_timestamp();
  server_ms := extract(epoch from t) * 1000;
  IF held.owner IS NULL OR held.expires_at + held.delay_ms * interval '1 millisecond' <= t THEN
    IF "public"."distributed_locks_grant_next"(p_name, t) IS NULL THEN
      DELETE FROM "public"."distributed_locks_queue" WHERE name = p_name;
      UPDATE "public"."distributed_locks" SET owner = p_owner, fence = nextval('"public"."distributed_locks_fence"'), expires_at = t + p_ttl_ms * interval '1 millisecond', contended = false, delay_ms = p_delay_ms
        WHERE name = p_name RETURNING * INTO held;
    ELSE
      SELECT * INTO held FROM "public"."distributed_locks" WHERE name = p_name;
    END IF;
  END IF;
  left_ms := extract(epoch from held.expires_at + CASE WHEN held.expires_at <= t THEN held.delay_ms * interval '1 millisecond' ELSE interval '0' END) * 1000 - server_ms;
  IF held.owner = p_owner THEN
    granted_fence := held.fence;
    RETURN;
  END IF;
  UPDATE "public"."distributed_locks_queue" SET alive_until = t + p_alive_ms * interval '1 millisecond' WHERE owner = p_owner AND name = p_name;
  IF NOT FOUND AND p_queue THEN
    INSERT INTO "public"."distributed_locks_queue" (name, owner, channel, ttl_ms, alive_until, delay_ms) VALUES (p_name, p_owner, p_channel, p_ttl_ms, t + p_alive_ms * interval '1 millisecond', p_delay_ms);
    -- The release's single UPDATE (which reads only this row) must now leave the hand-off to the function.
    UPDATE "public"."distributed_locks" SET contended = true WHERE name = p_name AND NOT contended;
  END IF;
END $$;

-- Let go, owner-checked and idempotent: a holder hands the lock to the next live waiter in this
-- same statement (or frees the name, keeping its row, when nobody waits); a waiter leaves the queue.
-- (Not contended, the release statement frees the row itself and never calls this.)
-- The name's row is locked whoever owns it, and its owner read after that lock: a waiter leaving
-- while a release hands the lock to it waits for the hand-off and then lets go of the lock, where a
-- check of the owner before the lock would see the old holder and strand the lock with the waiter.
CREATE OR REPLACE FUNCTION "public"."distributed_locks_release"(p_name text, p_owner text) RETURNS text
LANGUAGE plpgsql AS $$
DECLARE
  current_owner text;
  handed_to text;
BEGIN
  -- A lease that ran out with a lock-delay is its holder's no longer: the delay runs its course.
  SELECT CASE WHEN delay_ms > 0 AND expires_at <= clock_timestamp() THEN NULL ELSE owner END INTO current_owner FROM "public"."distributed_locks" WHERE name = p_name FOR UPDATE;
  IF current_owner IS DISTINCT FROM p_owner THEN
    DELETE FROM "public"."distributed_locks_queue" WHERE owner = p_owner AND name = p_name;
    -- A writer that leaves from behind shared holders may have held back the entries behind it.
    IF FOUND AND current_owner = '' THEN
      PERFORM "public"."distributed_locks_settle"(p_name, clock_timestamp());
    END IF;
    RETURN NULL;
  END IF;
  handed_to := "public"."distributed_locks_grant_next"(p_name, clock_timestamp());
  IF handed_to IS NULL THEN
    DELETE FROM "public"."distributed_locks_queue" WHERE name = p_name;
    UPDATE "public"."distributed_locks" SET owner = NULL, expires_at = clock_timestamp(), contended = false WHERE name = p_name;
  END IF;
  RETURN handed_to;
END $$;

-- Read and permit entries. mode NULL: a write entry; lim: a permit's semaphore limit.
-- (Added only when missing, so an existing queue table is not locked at every start.)
DO $$ BEGIN
  IF NOT EXISTS (SELECT FROM pg_attribute WHERE attrelid = '"public"."distributed_locks_queue"'::regclass AND attname = 'mode' AND NOT attisdropped) THEN
    ALTER TABLE "public"."distributed_locks_queue" ADD COLUMN IF NOT EXISTS mode text, ADD COLUMN IF NOT EXISTS lim integer;
  END IF;
END $$;

-- The read or permit entries that hold each name, each with a lease of its own and its token.
CREATE TABLE IF NOT EXISTS "public"."distributed_locks_holders" (
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
CREATE OR REPLACE FUNCTION "public"."distributed_locks_hold"(p_name text, p_owner text, p_mode text, p_lim integer, p_ttl_ms integer, t timestamptz) RETURNS bigint
LANGUAGE plpgsql AS $$
DECLARE
  granted bigint := nextval('"public"."distributed_locks_fence"');
BEGIN
  INSERT INTO "public"."distributed_locks_holders" (name, owner, mode, lim, fence, granted_at, expires_at) VALUES (p_name, p_owner, p_mode, p_lim, granted, t, t + p_ttl_ms * interval '1 millisecond')
    ON CONFLICT (name, owner) DO UPDATE SET mode = EXCLUDED.mode, lim = EXCLUDED.lim, fence = EXCLUDED.fence, granted_at = EXCLUDED.granted_at, expires_at = EXCLUDED.expires_at;
  UPDATE "public"."distributed_locks" SET expires_at = greatest(expires_at, t + p_ttl_ms * interval '1 millisecond') WHERE name = p_name;
  RETURN granted;
END $$;

-- Shared holders hold the name: grants, in seq order, every live waiter that may go, and stops at
-- the first that may not (a writer, or a permit with limit entries ahead), so no entry passes
-- another. Each grant is notified on its process's channel.
CREATE OR REPLACE FUNCTION "public"."distributed_locks_admit"(p_name text, t timestamptz) RETURNS void
LANGUAGE plpgsql AS $$
DECLARE
  ahead integer;
  w "public"."distributed_locks_queue"%ROWTYPE;
BEGIN
  SELECT count(*) INTO ahead FROM "public"."distributed_locks_holders" WHERE name = p_name AND expires_at > t;
  FOR w IN SELECT * FROM "public"."distributed_locks_queue" WHERE name = p_name AND alive_until > t ORDER BY seq LOOP
    EXIT WHEN w.mode IS NULL OR (w.mode = 'permit' AND ahead >= w.lim);
    DELETE FROM "public"."distributed_locks_queue" WHERE seq = w.seq;
    PERFORM pg_notify(w.channel, w.owner || ' ' || "public"."distributed_locks_hold"(p_name, w.owner, w.mode, w.lim, w.ttl_ms, t) || ' ' || extract(epoch from t) * 1000);
    ahead := ahead + 1;
  END LOOP;
END $$;

-- Shared holders held the name (owner ''): drops the ended leases, then grants who may go now,
-- or hands the name to the first waiter once no holder is left, or frees it.
CREATE OR REPLACE FUNCTION "public"."distributed_locks_settle"(p_name text, t timestamptz) RETURNS void
LANGUAGE plpgsql AS $$
BEGIN
  DELETE FROM "public"."distributed_locks_holders" WHERE name = p_name AND expires_at <= t;
  IF EXISTS (SELECT FROM "public"."distributed_locks_holders" WHERE name = p_name) THEN
    PERFORM "public"."distributed_locks_admit"(p_name, t);
    UPDATE "public"."distributed_locks" SET expires_at = (SELECT max(expires_at) FROM "public"."distributed_locks_holders" WHERE name = p_name) WHERE name = p_name;
  ELSIF "public"."distributed_locks_grant_next"(p_name, t) IS NULL THEN
    DELETE FROM "public"."distributed_locks_queue" WHERE name = p_name;
    UPDATE "public"."distributed_locks" SET owner = NULL, expires_at = t, contended = false WHERE name = p_name;
  END IF;
END $$;

-- Take a read or permit entry of the name if it may go now, else queue it (p_queue) at the tail.
-- Called again by a waiting process (its safety net), it refreshes the entry and grants what the
-- end of a lease let go. other_limit: a permit of the name, held or queued, has another limit
-- (nothing was done). left_ms: until the lease whose end can next let this entry go.
CREATE OR REPLACE FUNCTION "public"."distributed_locks_acquire_shared"(p_name text, p_owner text, p_channel text, p_mode text, p_lim integer, p_ttl_ms integer, p_alive_ms integer, p_queue boolean,
  OUT granted_fence bigint, OUT left_ms double precision, OUT server_ms double precision, OUT other_limit integer)
LANGUAGE plpgsql AS $$
DECLARE
  held "public"."distributed_locks"%ROWTYPE;
  mine "public"."distributed_locks_holders"%ROWTYPE;
  t timestamptz;
BEGIN
  LOOP
    SELECT * INTO held FROM "public"."distributed_locks" WHERE name = p_name FOR UPDATE;
    EXIT WHEN FOUND;
    INSERT INTO "public"."distributed_locks" (name, owner, fence, expires_at) VALUES (p_name, NULL, 0, clock_timestamp()) ON CONFLICT (name) DO NOTHING;
  END LOOP;
  t := clock_timestamp();
  server_ms := extract(epoch from t) * 1000;
  IF p_mode = 'permit' THEN
    SELECT lim INTO other_limit FROM "public"."distributed_locks_holders" WHERE name = p_name AND lim <> p_lim AND expires_at > t LIMIT 1;
    IF other_limit IS NULL THEN
      SELECT lim INTO other_limit FROM "public"."distributed_locks_queue" WHERE name = p_name AND lim <> p_lim AND alive_until > t LIMIT 1;
    END IF;
    IF other_limit IS NOT NULL THEN
      RETURN;
    END IF;
  END IF;
  IF held.owner = '' THEN
    PERFORM "public"."distributed_locks_settle"(p_name, t);
  ELSIF held.owner IS NOT NULL AND held.expires_at + held.delay_ms * interval '1 millisecond' <= t THEN
    -- A write holder's lease ended (and its lock-delay): the next waiter gets the name, or nobody holds it.
    IF "public"."distributed_locks_grant_next"(p_name, t) IS NULL THEN
      DELETE FROM "public"."distributed_locks_queue" WHERE name = p_name;
      UPDATE "public"."distributed_locks" SET owner = NULL WHERE name = p_name;
    END IF;
  END IF;
  SELECT * INTO held FROM "public"."distributed_locks" WHERE name = p_name;
  SELECT * INTO mine FROM "public"."distributed_locks_holders" WHERE name = p_name AND owner = p_owner AND expires_at > t;
  IF FOUND THEN
    granted_fence := mine.fence;
    left_ms := extract(epoch from mine.expires_at) * 1000 - server_ms;
    RETURN;
  END IF;
  UPDATE "public"."distributed_locks_queue" SET alive_until = t + p_alive_ms * interval '1 millisecond' WHERE owner = p_owner AND name = p_name;
  IF NOT FOUND THEN
    -- Free (nobody waits then), or shared holders with room and nobody waiting: it goes now.
    IF held.owner IS NULL OR (held.owner = '' AND NOT EXISTS (SELECT FROM "public"."distributed_locks_queue" WHERE name = p_name AND alive_until > t)
        AND (p_mode = 'read' OR (SELECT count(*) FROM "public"."distributed_locks_holders" WHERE name = p_name AND expires_at > t) < p_lim)) THEN
      IF held.owner IS NULL THEN
        DELETE FROM "public"."distributed_locks_holders" WHERE name = p_name;
        UPDATE "public"."distributed_locks" SET owner = '', expires_at = t, contended = false, delay_ms = 0 WHERE name = p_name;
      END IF;
      granted_fence := "public"."distributed_locks_hold"(p_name, p_owner, p_mode, p_lim, p_ttl_ms, t);
      left_ms := p_ttl_ms;
      RETURN;
    END IF;
    IF p_queue THEN
      INSERT INTO "public"."distributed_locks_queue" (name, owner, channel, ttl_ms, alive_until, mode, lim) VALUES (p_name, p_owner, p_channel, p_ttl_ms, t + p_alive_ms * interval '1 millisecond', p_mode, p_lim);
      UPDATE "public"."distributed_locks" SET contended = true WHERE name = p_name AND NOT contended;
    END IF;
  END IF;
  IF held.owner = '' AND p_mode = 'permit' THEN
    left_ms := extract(epoch from (SELECT min(expires_at) FROM "public"."distributed_locks_holders" WHERE name = p_name AND expires_at > t)) * 1000 - server_ms;
  ELSE
    left_ms := extract(epoch from held.expires_at + CASE WHEN held.owner <> '' AND held.expires_at <= t THEN held.delay_ms * interval '1 millisecond' ELSE interval '0' END) * 1000 - server_ms;
  END IF;
END $$;

-- Let go of a read or permit entry, owner-checked and idempotent, held or queued; what its
-- leaving lets go is granted in this same statement.
CREATE OR REPLACE FUNCTION "public"."distributed_locks_release_shared"(p_name text, p_owner text) RETURNS void
LANGUAGE plpgsql AS $$
DECLARE
  current_owner text;
  removed boolean;
BEGIN
  SELECT owner INTO current_owner FROM "public"."distributed_locks" WHERE name = p_name FOR UPDATE;
  DELETE FROM "public"."distributed_locks_holders" WHERE name = p_name AND owner = p_owner;
  removed := FOUND;
  DELETE FROM "public"."distributed_locks_queue" WHERE name = p_name AND owner = p_owner;
  IF (removed OR FOUND) AND current_owner = '' THEN
    PERFORM "public"."distributed_locks_settle"(p_name, clock_timestamp());
  END IF;
END $$;

-- Extends a shared holder's running lease, owner- and fence-checked; NULL when it is not ours.
CREATE OR REPLACE FUNCTION "public"."distributed_locks_renew_shared"(p_name text, p_owner text, p_ttl_ms integer, p_fence bigint) RETURNS double precision
LANGUAGE plpgsql AS $$
DECLARE
  t timestamptz;
BEGIN
  PERFORM 1 FROM "public"."distributed_locks" WHERE name = p_name AND owner = '' FOR UPDATE;
  IF NOT FOUND THEN
    RETURN NULL;
  END IF;
  t := clock_timestamp();
  UPDATE "public"."distributed_locks_holders" SET expires_at = t + p_ttl_ms * interval '1 millisecond' WHERE name = p_name AND owner = p_owner AND fence = p_fence AND expires_at > t;
  IF NOT FOUND THEN
    RETURN NULL;
  END IF;
  UPDATE "public"."distributed_locks" SET expires_at = greatest(expires_at, t + p_ttl_ms * interval '1 millisecond') WHERE name = p_name;
  RETURN extract(epoch from t) * 1000;
END $$;

-- The operator's escape hatch: removes every current holder of the name (a writer through the
-- release function) and grants the waiters that may go then. True when a holder was removed.
CREATE OR REPLACE FUNCTION "public"."distributed_locks_force_release"(p_name text) RETURNS boolean
LANGUAGE plpgsql AS $$
DECLARE
  held "public"."distributed_locks"%ROWTYPE;
  t timestamptz;
  removed boolean;
BEGIN
  SELECT * INTO held FROM "public"."distributed_locks" WHERE name = p_name FOR UPDATE;
  t := clock_timestamp();
  IF NOT FOUND OR held.owner IS NULL OR held.expires_at <= t THEN
    RETURN false;
  END IF;
  IF held.owner <> '' THEN
    PERFORM "public"."distributed_locks_release"(p_name, held.owner);
    RETURN true;
  END IF;
  DELETE FROM "public"."distributed_locks_holders" WHERE name = p_name AND expires_at > t;
  removed := FOUND;
  PERFORM "public"."distributed_locks_settle"(p_name, t);
  RETURN removed;
END $$;
