import { fenceEpochLua } from './fence-epoch-lua';
import { DELAY_KEY_LUA, DELAY_LUA } from './redis-delay-lua';
import { MODE_LUA, SHARED_VALUE } from './redis-mode-lua';
import { RedisScript } from './redis-script';
import { lifeCheckLua, type LifeReply } from './server-life-scripts';

/** Grants are published on `<prefix><clientId>`; an ACL user needs `&nest-distributed-lock:*`. */
export const GRANT_CHANNEL_PREFIX = 'nest-distributed-lock:';

/*
 * The lock as Lua, one script per operation, so each is one round trip and atomic.
 * KEYS (see redis-keys.ts): 1 owner, 2 fence, 3 queue, 4 waiters, 5 alive, and for the scripts
 * that grant, 6 the server's life marker (server-life-scripts.ts; absent on a Cluster); read and
 * permit entries (redis-mode-lua.ts) also use two keys derived from the owner key's name.
 * Redis time (TIME) decides whether a waiter is alive, so client clocks never matter. Scripts
 * write after TIME, which Redis allows since 5.0 (effects replication; the default from 5.0).
 */
/** What queueing needs: shared by every script that adds a waiter. */
const QUEUING = `
local function now_ms()
  local t = redis.call('time')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end

local function keep_for(key, ms)
  if redis.call('pttl', key) < ms then redis.call('pexpire', key, ms) end
end

-- The queue's keys outlive their last live waiter by a little, then vanish on their own.
local function mark_alive(client, stale_after_ms, now)
  redis.call('hset', KEYS[5], client, (now or now_ms()) + stale_after_ms)
  keep_for(KEYS[3], stale_after_ms * 2)
  keep_for(KEYS[4], stale_after_ms * 2)
  keep_for(KEYS[5], stale_after_ms * 2)
end

-- The fence is taken when the entry queues (as etcd's create revision, ZooKeeper's czxid):
-- grants follow the queue, so they still get increasing fences.
local function enqueue(owner, ttl, client, fence)
  redis.call('rpush', KEYS[3], owner)
  redis.call('hset', KEYS[4], owner, ttl .. ' ' .. client .. ' ' .. fence)
end
`;

/** What handing the lock on needs, after QUEUING. */
const HANDING = `
local CHANNEL_PREFIX = '${GRANT_CHANNEL_PREFIX}'
${DELAY_LUA}
-- The lock name, as the grant message gives it: the hash tag of the keys (see redis-keys.ts),
-- percent-decoded. Read from the keys, so that no call pays an argument for what only a hand-off needs.
local function raw_key()
  local tag = string.match(KEYS[1], '{([^{}]*)}:owner$')
  return (string.gsub(tag, '%%(%x%x)', function(hex) return string.char(tonumber(hex, 16)) end))
end

-- A write waiter's entry in the waiters hash: '<ttlMs> <clientId> <fence>' (other modes add theirs: no match).
local function parse_entry(entry)
  return string.match(entry, '^(%d+d?%d*) (%S+) (%d+)$')
end

local function split(value)
  local space = string.find(value, ' ', 1, true)
  return string.sub(value, 1, space - 1), string.sub(value, space + 1)
end

local function next_fence()
  local fence = redis.call('incr', KEYS[2])
  ${fenceEpochLua('fence', 'KEYS[2]')}
  return string.format('%d', fence)
end

local function own(owner, ttl, fence)
  local lease, delay = lease_of(ttl)
  redis.call('set', KEYS[1], fence .. ' ' .. owner, 'px', lease)
  if delay then redis.call('set', DELAY, fence .. ' ' .. owner, 'px', lease + delay) end
end

-- A free key taken at once: a new fence.
local function grant(owner, ttl)
  local fence = next_fence()
  own(owner, ttl, fence)
  return fence
end

-- Makes the next live waiter the owner, with the fence it was given when it queued, and tells
-- its process on its channel, with the server's time of the grant (the waiter's lease counts
-- from it, never from when the message is read); frees the key only when no live waiter is left. Entries of waiters
-- that gave up (no longer in the waiters hash) and of dead processes (alive deadline passed)
-- are skipped, never waited for.
-- released: the holder let go (a release, a cancel, an operator's release), which ends its delay
-- and leaves no other (none could be granted while one ran), so there is nothing to look for.
local function hand_off(released)
  -- A lease that ran out unreleased holds the name for its lock-delay.
  if not released and redis.call('exists', DELAY) == 1 then return end
  local now
  while true do
    local owner = redis.call('lpop', KEYS[3])
    if not owner then
      redis.call('del', KEYS[1])
      return
    end
    local entry = redis.call('hget', KEYS[4], owner)
    if entry then
      local ttl, client, fence = parse_entry(entry)
      if not ttl then
        -- A read or permit entry: it goes with those behind it that the rule lets go.
        redis.call('lpush', KEYS[3], owner)
        redis.call('del', KEYS[1])
        do
${MODE_LUA}
          grant_queue(now or now_ms())
        end
        return
      end
      redis.call('hdel', KEYS[4], owner)
      now = now or now_ms()
      local alive_until = tonumber(redis.call('hget', KEYS[5], client))
      if alive_until and alive_until >= now then
        own(owner, ttl, fence)
        redis.call('publish', CHANNEL_PREFIX .. client, cjson.encode({fence, raw_key(), owner, string.format('%d', now)}))
        return
      end
    end
  end
end

-- A holder whose lease ran out leaves the key to the queue, not to whoever asks next.
-- Returns whether the key is (still) free.
local function hand_off_if_expired()
  if redis.call('exists', KEYS[1]) == 1 then return false end
  if redis.call('llen', KEYS[3]) == 0 then return true end
  hand_off()
  return redis.call('exists', KEYS[1]) == 0
end

-- The caller's SET took a key whose holder's lease ran out while others queue: they come first.
-- Returns whether the caller holds it (no live waiter was left to hand it to). What
-- hand_off_if_expired would ask first is known here: the key was just deleted, the queue is not empty.
local function take_after_expiry(owner, ttl, fence)
  redis.call('del', KEYS[1])
  hand_off()
  if redis.call('exists', KEYS[1]) == 1 then return false end
  own(owner, ttl, fence)
  return true
end
`;

/**
 * Every function, for scripts that may hand the lock on. Each script defines only what it may
 * use, after its common case: Lua makes a closure per function definition on every run.
 */
export const COMMON = QUEUING + HANDING;

/** The acquire script's reply for an entry that queued: see acquireScript. */
export type QueuedReply = [0, number, string, number];

/** The acquire script's reply: the fence when granted, else why not (see acquireScript). */
export type AcquireReply = number | [0, number] | QueuedReply | LifeReply;

/**
 * The acquire script, with `tookExpired` for the case where the caller's SET took a key whose
 * holder's lease ran out while others queue (they come first): see acquireScript and acquireShortScript.
 */
function acquireLua(tookExpired: string): string {
  return `${lifeCheckLua(6, "string.match(ARGV[2], '^%d+')")}
-- The fence first: the lock's if the key is free, this caller's place in the queue otherwise.
local fence = redis.call('incr', KEYS[2])
${fenceEpochLua('fence', 'KEYS[2]')}
local fence_text = string.format('%d', fence)
-- A lease that ran out unreleased less than its lock-delay ago holds the key (redis-delay-lua.ts).
local delay_key = ${DELAY_KEY_LUA}
local lease, delay = string.match(ARGV[2], '^(%d+)d(%d+)$')
local taken = redis.call('exists', delay_key) == 0 and redis.call('set', KEYS[1], fence_text .. ' ' .. ARGV[1], 'nx', 'px', lease or ARGV[2])
if taken and delay then redis.call('set', delay_key, fence_text .. ' ' .. ARGV[1], 'px', lease + delay) end
-- The common case, before any function is made: a free key, nobody queued.
if taken and redis.call('llen', KEYS[3]) == 0 then return fence end
if taken then
${tookExpired}
end
local pttl = redis.call('pttl', KEYS[1])
if pttl < 0 then pttl = redis.call('pttl', delay_key) end
if not ARGV[3] then return {0, pttl} end
${QUEUING}
local stale_after, client = string.match(ARGV[3], '^(%d+) (%S+)$')
local now = now_ms()
enqueue(ARGV[1], ARGV[2], client, fence_text)
mark_alive(client, tonumber(stale_after), now)
return {0, pttl, fence_text, now}
`;
}

/**
 * ARGV: owner, ttlMs, and, when the caller may queue, '<staleAfterMs> <clientId>'.
 * Reply: the fence (an integer) when granted; {0, ownerPttlMs} when held by another and the
 * caller may not queue; when queued {0, ownerPttlMs, fence, serverMs}: the fence the entry will
 * hold the lock with, and the server's time (ms), which bounds how far the server's clock is
 * ahead of ours; the life check's reply (LifeReply) when the server is closed to grants.
 * The common case costs the fewest words each way: Redis spends about as much on
 * each argument and on a table reply as on a command.
 */
export const acquireScript = new RedisScript<AcquireReply>(
  'acquire',
  acquireLua(`  do
${COMMON}
    if take_after_expiry(ARGV[1], ARGV[2], fence_text) then return fence end
  end`),
);

/**
 * acquireScript without the hand-off to the queue after an expired lease, the one case that needs
 * the lock's shared functions: Redis spends time on every call in proportion to a script's text,
 * and this one is a fifth of that one. In that case it gives the key back (the fence it took is
 * simply never used) and replies nil: acquireScript is to be sent. Otherwise it replies as
 * acquireScript does.
 */
export const acquireShortScript = new RedisScript<AcquireReply | null>(
  'acquire',
  acquireLua(`  redis.call('del', KEYS[1])
  if delay then redis.call('del', delay_key) end
  return false`),
);

/**
 * ARGV: '<fence> <owner>', and '1' when the holder may have a lock-delay key (its entry asked for
 * one, or nobody knows: an unwanted grant handed on). Reply: 1 released (and handed on), 0 not ours.
 */
export const releaseScript = new RedisScript<0 | 1>(
  'release',
  `if redis.call('get', KEYS[1]) ~= ARGV[1] then return 0 end
-- A release ends the holder's lock-delay too.
if ARGV[2] then redis.call('del', ${DELAY_KEY_LUA}) end
-- Nobody queued (the common case): free the key, before the functions below are made.
if redis.call('llen', KEYS[3]) == 0 then
  redis.call('del', KEYS[1])
  return 1
end
${COMMON}
hand_off(true)
return 1
`,
);

/**
 * releaseScript's common case alone, for a holder that was granted without queueing: Redis spends
 * time on every call in proportion to a script's text, and this one is a twentieth of that one.
 * KEYS: owner, queue. ARGV: as releaseScript's. Reply: 1 released, 0 not ours, 2 others queue and
 * nothing was done: releaseScript hands the lock on.
 */
export const releaseShortScript = new RedisScript<0 | 1 | 2>(
  'release',
  `if redis.call('get', KEYS[1]) ~= ARGV[1] then return 0 end
if redis.call('llen', KEYS[2]) ~= 0 then return 2 end
if ARGV[2] then redis.call('del', ${DELAY_KEY_LUA}) end
redis.call('del', KEYS[1])
return 1
`,
);

/** KEYS: owner only. ARGV: '<fence> <owner>', ttlMs, and the holder's lockDelayMs if it has one. Reply: 1 extended, 0 not ours. */
export const renewScript = new RedisScript<0 | 1>(
  'renew',
  `if redis.call('get', KEYS[1]) ~= ARGV[1] then return 0 end
redis.call('pexpire', KEYS[1], ARGV[2])
if ARGV[3] then redis.call('pexpire', ${DELAY_KEY_LUA}, ARGV[2] + ARGV[3]) end
return 1
`,
);

/**
 * renewScript for many locks at once (RedisCommands.renew). KEYS: the owner keys. ARGV: the values,
 * then the ttls, in KEYS' order. Reply: 1 or 0 per key, as renewScript's.
 */
export const renewManyScript = new RedisScript<(0 | 1)[]>(
  'renew many',
  `local n = #KEYS
local renewed = {}
for i = 1, n do
  if redis.call('get', KEYS[i]) == ARGV[i] then
    redis.call('pexpire', KEYS[i], ARGV[n + i])
    renewed[i] = 1
  else
    renewed[i] = 0
  end
end
return renewed
`,
);

/**
 * A waiter gave up: leave the queue, and if a grant raced with the decision, hand it on at once;
 * behind read or permit holders, the entries it held up are granted.
 * ARGV: owner. Reply: 1 when it had been granted (and is now handed on).
 */
export const cancelScript = new RedisScript<0 | 1>(
  'cancel',
  `${COMMON}
redis.call('hdel', KEYS[4], ARGV[1])
local value = redis.call('get', KEYS[1])
if value then
  local _, owner = split(value)
  if owner == ARGV[1] then
    redis.call('del', DELAY)
    hand_off(true)
    return 1
  end
  -- Readers or permits hold: entries behind this one may go now.
  if value == '${SHARED_VALUE}' then
${MODE_LUA}
    grant_queue(now_ms())
  end
end
return 0
`,
);

/**
 * The safety net, run now and then per waiting key per process (never per handoff): keeps this
 * process's waiters alive, hands an expired lease to the queue, finds grants whose message was
 * lost, and puts back waiters whose entries vanished (a server restart without persistence).
 * ARGV: clientId, staleAfterMs, then owner, ttlMs pairs in local FIFO order.
 * Reply: {ownerPttlMs, {owner, fence, ...} of the local waiters that own the lock,
 * {owner, ...} of the local waiters put back in the queue (with new fences), serverMs}, or the
 * life check's (LifeReply): the waiters vanished with the server's data, and nothing is granted yet.
 */
export const checkScript = new RedisScript<[number, string[], string[], number] | LifeReply>(
  'check',
  `${lifeCheckLua(6, undefined, 'quarantined')}${COMMON}
local now = now_ms()
mark_alive(ARGV[1], tonumber(ARGV[2]), now)
local holder, holder_fence
if quarantined then
  -- Closed to new grants: only one made already (a release's hand-off) is reported.
  local value = redis.call('get', KEYS[1])
  if value then holder_fence, holder = split(value) end
  for i = 3, #ARGV, 2 do
    if ARGV[i] == holder then return {redis.call('pttl', KEYS[1]), {holder, holder_fence}, {}, now} end
  end
  return quarantined
end
hand_off_if_expired()
local value = redis.call('get', KEYS[1])
if value then holder_fence, holder = split(value) end
local granted, requeued = {}, {}
for i = 3, #ARGV, 2 do
  local owner, ttl = ARGV[i], ARGV[i + 1]
  if owner == holder then
    granted[#granted + 1] = owner
    granted[#granted + 1] = holder_fence
  elseif redis.call('hexists', KEYS[4], owner) == 0 then
    if holder or delayed() then
      enqueue(owner, ttl, ARGV[1], next_fence())
      requeued[#requeued + 1] = owner
    else
      holder, holder_fence = owner, grant(owner, ttl)
      granted[#granted + 1] = owner
      granted[#granted + 1] = holder_fence
    end
  end
end
return {blocked_pttl(), granted, requeued, now}
`,
);
