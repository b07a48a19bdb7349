-- nest-distributed-lock: the PostgreSQL backend's tables and functions (schema "public", table "distributed_locks").
-- Idempotent: safe to run again. See docs/postgres.md.

CREATE SCHEMA IF NOT EXISTS "public";

-- One row per lock name: its holder (an entry of the queue below, or a caller that took it
-- outright), its fencing token and the end of its lease on the database's clock. owner NULL: free,
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

-- Fencing tokens: a sequence never goes back, not even after a crash and restart.
CREATE SEQUENCE IF NOT EXISTS "public"."distributed_locks_fence";

-- The first live waiter of the name gets the lock (the caller holds the name's row lock): a new
-- token, a lease of its ttl, and one notification on its process's channel. NULL: nobody waits.
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
  UPDATE "public"."distributed_locks" SET owner = next_waiter.owner, fence = nextval('"public"."distributed_locks_fence"'), expires_at = t + next_waiter.ttl_ms * interval '1 millisecond'
    WHERE name = p_name RETURNING fence INTO granted;
  PERFORM pg_notify(next_waiter.channel, next_waiter.owner || ' ' || granted || ' ' || extract(epoch from t) * 1000);
  RETURN next_waiter.owner;
END $$;

-- Take the lock if it is free (or its lease ended) and nobody waits; else queue (p_queue) behind the others. Called
-- again by a waiting process (its safety net), it refreshes the entry, takes a lock its entry was
-- granted or that expired with nobody ahead, and queues anew an entry that was dropped.
-- granted_fence is NULL while waiting; left_ms is what is left of the holder's lease.
CREATE OR REPLACE FUNCTION "public"."distributed_locks_acquire"(p_name text, p_owner text, p_channel text, p_ttl_ms integer, p_alive_ms integer, p_queue boolean,
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
  UPDATE "public"."distributed_locks" SET owner = p_owner, fence = nextval('"public"."distributed_locks_fence"'), expires_at = t + p_ttl_ms * interval '1 millisecond'
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
    INSERT INTO "public"."distributed_locks" (name, owner, fence, expires_at) VALUES (p_name, p_owner, nextval('"public"."distributed_locks_fence"'), t + p_ttl_ms * interval '1 millisecond')
      ON CONFLICT (name) DO NOTHING RETURNING fence INTO granted_fence;
    IF FOUND THEN
      left_ms := p_ttl_ms;
      server_ms := extract(epoch from t) * 1000;
      RETURN;
    END IF;
  END LOOP;
  t := clock_timestamp();
  server_ms := extract(epoch from t) * 1000;
  IF held.owner IS NULL OR held.expires_at <= t THEN
    IF "public"."distributed_locks_grant_next"(p_name, t) IS NULL THEN
      DELETE FROM "public"."distributed_locks_queue" WHERE name = p_name;
      UPDATE "public"."distributed_locks" SET owner = p_owner, fence = nextval('"public"."distributed_locks_fence"'), expires_at = t + p_ttl_ms * interval '1 millisecond', contended = false
        WHERE name = p_name RETURNING * INTO held;
    ELSE
      SELECT * INTO held FROM "public"."distributed_locks" WHERE name = p_name;
    END IF;
  END IF;
  left_ms := extract(epoch from held.expires_at) * 1000 - server_ms;
  IF held.owner = p_owner THEN
    granted_fence := held.fence;
    RETURN;
  END IF;
  UPDATE "public"."distributed_locks_queue" SET alive_until = t + p_alive_ms * interval '1 millisecond' WHERE owner = p_owner AND name = p_name;
  IF NOT FOUND AND p_queue THEN
    INSERT INTO "public"."distributed_locks_queue" (name, owner, channel, ttl_ms, alive_until) VALUES (p_name, p_owner, p_channel, p_ttl_ms, t + p_alive_ms * interval '1 millisecond');
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
  SELECT owner INTO current_owner FROM "public"."distributed_locks" WHERE name = p_name FOR UPDATE;
  IF current_owner IS DISTINCT FROM p_owner THEN
    DELETE FROM "public"."distributed_locks_queue" WHERE owner = p_owner AND name = p_name;
    RETURN NULL;
  END IF;
  handed_to := "public"."distributed_locks_grant_next"(p_name, clock_timestamp());
  IF handed_to IS NULL THEN
    DELETE FROM "public"."distributed_locks_queue" WHERE name = p_name;
    UPDATE "public"."distributed_locks" SET owner = NULL, expires_at = clock_timestamp(), contended = false WHERE name = p_name;
  END IF;
  RETURN handed_to;
END $$;
