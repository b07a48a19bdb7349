import { RedisScript } from './redis-script';

/*
 * The lock as Lua, one script per operation, so each is one round trip and atomic.
 * KEYS (see redis-keys.ts): 1 owner, 2 fence, 3 queue, 4 waiters, 5 alive.
 * Redis time (TIME) decides whether a waiter is alive, so client clocks never matter. Scripts
 * write after TIME, which Redis allows since 5.0 (effects replication; the default from 5.0).
 */
const COMMON = `
local function now_ms()
  local t = redis.call('time')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end

local function split(value)
  local space = string.find(value, ' ', 1, true)
  return string.sub(value, 1, space - 1), string.sub(value, space + 1)
end

-- A waiter's entry in the waiters hash: '<ttlMs> <clientId> <fence>'.
local function parse_entry(entry)
  return string.match(entry, '^(%d+) (%S+) (%d+)$')
end

local function next_fence()
  return string.format('%d', redis.call('incr', KEYS[2]))
end

local function own(owner, ttl, fence)
  redis.call('set', KEYS[1], fence .. ' ' .. owner, 'px', ttl)
end

-- A free key taken at once: a new fence.
local function grant(owner, ttl)
  local fence = next_fence()
  own(owner, ttl, fence)
  return fence
end

-- Makes the next live waiter the owner, with the fence it was given when it queued, and tells
-- its process on its channel; frees the key only when no live waiter is left. Entries of waiters
-- that gave up (no longer in the waiters hash) and of dead processes (alive deadline passed)
-- are skipped, never waited for.
local function hand_off(channel_prefix, raw_key)
  local now
  while true do
    local owner = redis.call('lpop', KEYS[3])
    if not owner then
      redis.call('del', KEYS[1])
      return
    end
    local entry = redis.call('hget', KEYS[4], owner)
    if entry then
      redis.call('hdel', KEYS[4], owner)
      local ttl, client, fence = parse_entry(entry)
      now = now or now_ms()
      local alive_until = tonumber(redis.call('hget', KEYS[5], client))
      if alive_until and alive_until >= now then
        own(owner, ttl, fence)
        redis.call('publish', channel_prefix .. client, cjson.encode({fence, raw_key, owner}))
        return
      end
    end
  end
end

-- A holder whose lease ran out leaves the key to the queue, not to whoever asks next.
-- Returns whether the key is (still) free.
local function hand_off_if_expired(channel_prefix, raw_key)
  if redis.call('exists', KEYS[1]) == 1 then return false end
  if redis.call('llen', KEYS[3]) == 0 then return true end
  hand_off(channel_prefix, raw_key)
  return redis.call('exists', KEYS[1]) == 0
end

local function keep_for(key, ms)
  if redis.call('pttl', key) < ms then redis.call('pexpire', key, ms) end
end

-- The queue's keys outlive their last live waiter by a little, then vanish on their own.
local function mark_alive(client, stale_after_ms)
  redis.call('hset', KEYS[5], client, now_ms() + stale_after_ms)
  keep_for(KEYS[3], stale_after_ms * 2)
  keep_for(KEYS[4], stale_after_ms * 2)
  keep_for(KEYS[5], stale_after_ms * 2)
end

-- The fence is taken when the waiter queues (as etcd's create revision, ZooKeeper's czxid):
-- grants follow the queue, so they still get increasing fences, and a waiter of the holder's
-- own process knows its fence before the holder lets go (see the transfer script).
local function enqueue(owner, ttl, client)
  local fence = next_fence()
  redis.call('rpush', KEYS[3], owner)
  redis.call('hset', KEYS[4], owner, ttl .. ' ' .. client .. ' ' .. fence)
  return fence
end
`;

/**
 * ARGV: owner, ttlMs, clientId, staleAfterMs, channelPrefix, rawKey, mayQueue ('1' | '0').
 * Reply: {1, fence} granted; {0, ownerPttlMs} held by another; when queued
 * {0, ownerPttlMs, fence, ahead}: the fence this waiter will hold the lock with, and the owner id
 * of the entry right before it in the queue (the holder's when the queue was empty).
 */
export const acquireScript = new RedisScript<[1, string] | [0, number] | [0, number, string, string]>(
  'acquire',
  `${COMMON}
if hand_off_if_expired(ARGV[5], ARGV[6]) then
  return {1, grant(ARGV[1], ARGV[2])}
end
if ARGV[7] ~= '1' then return {0, redis.call('pttl', KEYS[1])} end
local ahead = redis.call('lindex', KEYS[3], -1)
if not ahead then
  local _, holder = split(redis.call('get', KEYS[1]))
  ahead = holder
end
local fence = enqueue(ARGV[1], ARGV[2], ARGV[3])
mark_alive(ARGV[3], tonumber(ARGV[4]))
return {0, redis.call('pttl', KEYS[1]), fence, ahead}
`,
);

/** ARGV: '<fence> <owner>', channelPrefix, rawKey. Reply: 1 released (and handed on), 0 not ours. */
export const releaseScript = new RedisScript<0 | 1>(
  'release',
  `${COMMON}
if redis.call('get', KEYS[1]) ~= ARGV[1] then return 0 end
hand_off(ARGV[2], ARGV[3])
return 1
`,
);

/**
 * A run of hand-overs inside one process, told to Redis at once: the lock went from the owner
 * Redis has to the waiter right behind it, and on to the one behind that, and so on, each
 * keeping the fence it queued with; the last one holds it now. Changes nothing unless the
 * owner and every waiter's entry are as the process believes. Standalone and short, because it
 * is sent by EVAL, never EVALSHA: a NOSCRIPT retry could land after the new holder's release.
 * KEYS: as the others. ARGV: owner value '<fence> <owner>', then owner, fence of each waiter in order.
 * Reply: 1 done; 0 the owner Redis has is another; 2 a waiter's entry is gone or has another
 * fence (it was re-queued): the owner is unchanged.
 */
export const transferScript = new RedisScript<0 | 1 | 2>(
  'transfer',
  `if redis.call('get', KEYS[1]) ~= ARGV[1] then return 0 end
local last_ttl
for i = 2, #ARGV, 2 do
  local entry = redis.call('hget', KEYS[4], ARGV[i])
  if not entry then return 2 end
  local ttl, _, fence = string.match(entry, '^(%d+) (%S+) (%d+)$')
  if fence ~= ARGV[i + 1] then return 2 end
  last_ttl = ttl
end
for i = 2, #ARGV, 2 do
  redis.call('hdel', KEYS[4], ARGV[i])
  redis.call('lrem', KEYS[3], 1, ARGV[i])
end
redis.call('set', KEYS[1], ARGV[#ARGV] .. ' ' .. ARGV[#ARGV - 1], 'px', last_ttl)
return 1
`,
);

/** KEYS: owner only. ARGV: '<fence> <owner>', ttlMs. Reply: 1 extended, 0 not ours. */
export const renewScript = new RedisScript<0 | 1>(
  'renew',
  `if redis.call('get', KEYS[1]) ~= ARGV[1] then return 0 end
redis.call('pexpire', KEYS[1], ARGV[2])
return 1
`,
);

/**
 * A waiter gave up: leave the queue, and if a grant raced with the decision, hand it on at once.
 * ARGV: owner, channelPrefix, rawKey. Reply: 1 when it had been granted (and is now handed on).
 */
export const cancelScript = new RedisScript<0 | 1>(
  'cancel',
  `${COMMON}
redis.call('hdel', KEYS[4], ARGV[1])
local value = redis.call('get', KEYS[1])
if value then
  local _, owner = split(value)
  if owner == ARGV[1] then
    hand_off(ARGV[2], ARGV[3])
    return 1
  end
end
return 0
`,
);

/**
 * The safety net, run now and then per waiting key per process (never per handoff): keeps this
 * process's waiters alive, hands an expired lease to the queue, finds grants whose message was
 * lost, and puts back waiters whose entries vanished (a server restart without persistence).
 * ARGV: clientId, staleAfterMs, channelPrefix, rawKey, then owner, ttlMs pairs in local FIFO order.
 * Reply: {ownerPttlMs, {owner, fence, ...} of the local waiters that own the lock,
 * {owner, ...} of the local waiters put back in the queue (with new fences)}.
 */
export const checkScript = new RedisScript<[number, string[], string[]]>(
  'check',
  `${COMMON}
mark_alive(ARGV[1], tonumber(ARGV[2]))
hand_off_if_expired(ARGV[3], ARGV[4])
local holder, holder_fence
local value = redis.call('get', KEYS[1])
if value then holder_fence, holder = split(value) end
local granted, requeued = {}, {}
for i = 5, #ARGV, 2 do
  local owner, ttl = ARGV[i], ARGV[i + 1]
  if owner == holder then
    granted[#granted + 1] = owner
    granted[#granted + 1] = holder_fence
  elseif redis.call('hexists', KEYS[4], owner) == 0 then
    if holder then
      enqueue(owner, ttl, ARGV[1])
      requeued[#requeued + 1] = owner
    else
      holder, holder_fence = owner, grant(owner, ttl)
      granted[#granted + 1] = owner
      granted[#granted + 1] = holder_fence
    end
  end
end
return {redis.call('pttl', KEYS[1]), granted, requeued}
`,
);
