import { fenceEpochLua } from '../redis/fence-epoch-lua';
import { RedisScript } from '../redis/redis-script';
import { LIFE_KEY, lifeCheckLua, type LifeReply } from '../redis/server-life-scripts';

/** The channel a master publishes "the lock is free" on, for the process `waiterId`. */
export const WAKE_CHANNEL_PREFIX = 'redlock:wake:';

/**
 * The keys of one lock name on every master: the lock (its value the holder's entry id), the
 * fence counter (never expires), the waiting processes in arrival order with the server
 * time each goes stale at, and the master's life marker (server-life-scripts.ts).
 */
export function redlockKeys(key: string): string[] {
  return [key, `${key}~fence`, `${key}~waiters`, `${key}~waiter-stale`, LIFE_KEY];
}

/**
 * Lock-delay on each master: a holder that asked for one keeps `<key>~delay` beside its lock key,
 * set to PX ttl + lockDelayMs with each grant and renewal and deleted by its release, so in the
 * master's own clock it outlives the lock key by the delay after a lease that ran out unreleased;
 * the acquire script grants nothing while it exists. A vote carries the entry's lease as '<ttl>'
 * or '<ttl>d<lockDelayMs>' (ARGV[2]).
 */
const DELAY_KEY = `KEYS[1] .. '~delay'`;

/** The server's time in ms, read only where needed: a lock taken and freed with nobody waiting costs the fewest calls. */
export const NOW = `local function now()
  local clock = redis.call('TIME')
  return tonumber(clock[1]) * 1000 + math.floor(tonumber(clock[2]) / 1000)
end`;

/**
 * Tells the first live waiter of the name (stale ones are dropped on the way) that the lock was
 * freed here, unless that waiter is \`skip\` (a waiter giving back a split vote retries by itself).
 */
export const WAKE = `local function wake(skip)
  local heads = redis.call('ZRANGE', KEYS[3], 0, 9)
  if #heads == 0 then return end
  local time = now()
  for _, head in ipairs(heads) do
    if tonumber(redis.call('HGET', KEYS[4], head) or '0') > time then
      if head ~= skip then redis.call('PUBLISH', '${WAKE_CHANNEL_PREFIX}' .. head, KEYS[1]) end
      return
    end
    redis.call('ZREM', KEYS[3], head)
    redis.call('HDEL', KEYS[4], head)
  end
end`;

/**
 * The acquire script's reply from one master: the fence when it granted, else {0, fence, pttl},
 * or the life check's refusal (a master that lost its data grants nothing for a while).
 */
export type MasterVote = number | [0, number, number] | LifeReply;

/**
 * ARGV: entry id, ttl ms, and, for a waiter (none for a try-lock), '<listed> <waiter id>
 * <stale-after ms> <arrival ms>': listed is 1 when the waiter may be listed here already (it
 * voted before: a first vote skips taking itself off the waiters); the arrival is the waiting
 * process's clock, so that every master orders its waiters alike, and one release wakes the
 * same process on all of them.
 * Free (or already ours): take it, count the fence up, leave the waiters; reply the fence.
 * Held: join the waiters (keeping the place already held) and reply {0, fence, pttl}, so the
 * waiter knows when a crashed holder's key runs out.
 * The common case (free, nobody waiting) comes first and costs two calls: SET NX, INCR. Its
 * arguments and reply are few: Redis spends about as much on each word as on a call.
 */
export const acquireScript = new RedisScript<MasterVote>(
  'redlock-acquire',
  `${lifeCheckLua(5, "string.match(ARGV[2], '^%d+')")}
-- A lease that ran out unreleased less than its lock-delay ago holds the name here (see DELAY_KEY).
local delay_key = ${DELAY_KEY}
local ttl, delay = string.match(ARGV[2], '^(%d+)d(%d+)$')
ttl = ttl or ARGV[2]
local won = redis.call('EXISTS', delay_key) == 0 and redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ttl)
if not won and redis.call('GET', KEYS[1]) == ARGV[1] then
  redis.call('PEXPIRE', KEYS[1], ttl)
  won = true
end
if won then
  if delay then redis.call('SET', delay_key, ARGV[1], 'PX', ttl + delay) end
  local fence = redis.call('INCR', KEYS[2])
  ${fenceEpochLua('fence', 'KEYS[2]')}
  -- 49: '1', a waiter that may be listed here.
  if ARGV[3] and string.byte(ARGV[3], 1) == 49 then
    local waiter = string.match(ARGV[3], '^1 (%S+)')
    if redis.call('HDEL', KEYS[4], waiter) == 1 then redis.call('ZREM', KEYS[3], waiter) end
  end
  return fence
end
${NOW}
if ARGV[3] then
  local waiter, stale_after, arrival = string.match(ARGV[3], '^%d (%S+) (%d+) (%d+)$')
  stale_after = tonumber(stale_after)
  redis.call('ZADD', KEYS[3], 'NX', arrival, waiter)
  redis.call('HSET', KEYS[4], waiter, now() + stale_after)
  redis.call('PEXPIRE', KEYS[3], stale_after * 2)
  redis.call('PEXPIRE', KEYS[4], stale_after * 2)
end
local pttl = redis.call('PTTL', KEYS[1])
if pttl < 0 then pttl = redis.call('PTTL', delay_key) end
return {0, tonumber(redis.call('GET', KEYS[2]) or '0'), pttl}`,
);

/**
 * ARGV: entry id, token. Raises the fence counter to the token while the entry still holds the
 * lock here: the write-back that leaves a majority at or above the token before it is handed out.
 */
export const raiseFenceScript = new RedisScript<0 | 1>(
  'redlock-raise-fence',
  `if redis.call('GET', KEYS[1]) ~= ARGV[1] then return 0 end
if tonumber(redis.call('GET', KEYS[2]) or '0') < tonumber(ARGV[2]) then redis.call('SET', KEYS[2], ARGV[2]) end
return 1`,
);

/** ARGV: entry id, ttl ms, and the entry's lockDelayMs if it has one. 1 when the entry still held the lock here and its expiry moved. */
export const renewScript = new RedisScript<0 | 1>(
  'redlock-renew',
  `if redis.call('GET', KEYS[1]) ~= ARGV[1] then return 0 end
redis.call('PEXPIRE', KEYS[1], ARGV[2])
if ARGV[3] then redis.call('PEXPIRE', ${DELAY_KEY}, ARGV[2] + ARGV[3]) end
return 1`,
);

/**
 * ARGV: entry id, then optionally the token to raise the fence to ('' for none), then optionally
 * the waiter id of the releaser. Owner-checked: deletes the lock only if the entry holds it, and
 * then wakes the first waiter. The fence is raised to the token either way (it only ever goes
 * up), which brings a master that lagged in step; a release whose vote saw no master lag sends
 * none.
 */
export const releaseScript = new RedisScript<0 | 1>(
  'redlock-release',
  `if ARGV[2] and ARGV[2] ~= '' and tonumber(redis.call('GET', KEYS[2]) or '0') < tonumber(ARGV[2]) then redis.call('SET', KEYS[2], ARGV[2]) end
if redis.call('GET', KEYS[1]) ~= ARGV[1] then return 0 end
-- A release ends the holder's lock-delay too (a no-op when it has none).
redis.call('DEL', KEYS[1], ${DELAY_KEY})
-- Nobody waits (the common case): done before the functions below are made, which Lua does on every run.
if redis.call('EXISTS', KEYS[3]) == 0 then return 1 end
${NOW}
${WAKE}
wake(ARGV[3] or '')
return 1`,
);

/**
 * ARGV: waiter id. Leaves the waiters of the name; when the lock is free here, the word goes to
 * the next live waiter (the one leaving may have been woken, and must not swallow the word).
 */
export const leaveScript = new RedisScript<0 | 1>(
  'redlock-leave',
  `${NOW}
${WAKE}
redis.call('ZREM', KEYS[3], ARGV[1])
redis.call('HDEL', KEYS[4], ARGV[1])
if redis.call('EXISTS', KEYS[1]) == 0 then wake('') end
return 1`,
);
