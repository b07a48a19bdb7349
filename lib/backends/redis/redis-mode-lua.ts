/**
 * The Lua functions of read and permit entries, for scripts that include the lock's COMMON
 * functions first (redis-lock-scripts.ts). hand_off includes them only in the branch that meets
 * such an entry, so a write-only name never makes their closures.
 *
 * A waiter's entry in the waiters hash (KEYS[4]) is '<ttlMs> <clientId> <fence>' for a write,
 * '<ttlMs> <clientId> <fence> <mode>' for the others, mode 'r' (read) or 'p<limit>' (permit).
 * Read and permit holders are kept in two keys derived from KEYS[1] (same hash tag, so the same
 * Cluster slot): '{tag}:holders', a sorted set of owner ids by lease end (server ms), and
 * '{tag}:grants', a hash owner id -> '<fence> <mode> <grantedAtMs>'. While any of them holds,
 * the owner key holds SHARED with the latest lease end as its expiry: a write entry's scripts
 * then see the lock as taken without knowing of modes.
 */
export const SHARED_VALUE = '0 *';

export const MODE_LUA = `
local HOLDERS = string.sub(KEYS[1], 1, -6) .. 'holders'
local GRANTS = string.sub(KEYS[1], 1, -6) .. 'grants'
-- No write grant has fence 0, so no owner-checked write script ever matches it.
local SHARED = '${SHARED_VALUE}'

local function parse_any(entry)
  return string.match(entry, '^(%d+d?%d*) (%S+) (%d+) ?(%S*)$')
end

-- A writer holds, or its lease ran out unreleased less than its lock-delay ago (redis-delay-lua.ts).
local function writer_holds()
  local value = redis.call('get', KEYS[1])
  if value == false then return redis.call('exists', DELAY) == 1 end
  return value ~= SHARED
end

-- Drops the holders whose lease ran out by now; returns how many still hold.
local function purge(now)
  local gone = redis.call('zrangebyscore', HOLDERS, '-inf', '(' .. now)
  if #gone > 0 then
    redis.call('zremrangebyscore', HOLDERS, '-inf', '(' .. now)
    -- One by one: unpack of a long list would overflow Lua's stack.
    for _, owner in ipairs(gone) do redis.call('hdel', GRANTS, owner) end
  end
  return redis.call('zcard', HOLDERS)
end

-- The owner key stands for the holders, until the latest lease end; freed when none holds.
-- Called only while no write entry holds.
local function cover(now)
  local last = redis.call('zrange', HOLDERS, -1, -1, 'withscores')
  if #last == 0 then
    if redis.call('get', KEYS[1]) == SHARED then redis.call('del', KEYS[1]) end
    return
  end
  local ms = math.max(1, tonumber(last[2]) - now)
  redis.call('set', KEYS[1], SHARED, 'px', ms)
  keep_for(HOLDERS, ms + 1000)
  keep_for(GRANTS, ms + 1000)
end

local function hold(owner, ttl, fence, mode, now)
  redis.call('zadd', HOLDERS, now + tonumber(ttl), owner)
  redis.call('hset', GRANTS, owner, fence .. ' ' .. mode .. ' ' .. now)
end

local function tell(client, owner, fence, now)
  redis.call('publish', CHANNEL_PREFIX .. client, cjson.encode({fence, raw_key(), owner, string.format('%d', now)}))
end

-- Grants, in queue order, the entries at the head of the queue that the rule lets go (write: none
-- ahead; read: no write ahead; permit: fewer than its limit ahead, holders included), each told on
-- its process's channel. Stops at the first live entry that may not go: everything behind it
-- waits too, which for one mode per name is the rule itself. Withdrawn entries and those of dead
-- processes are dropped on the way. Called only while no write entry holds.
local function grant_queue(now)
  local ahead = purge(now)
  while true do
    local owner = redis.call('lindex', KEYS[3], 0)
    if not owner then break end
    local entry = redis.call('hget', KEYS[4], owner)
    local ttl, client, fence, mode, alive_until
    if entry then
      ttl, client, fence, mode = parse_any(entry)
      alive_until = tonumber(redis.call('hget', KEYS[5], client))
    end
    if alive_until and alive_until >= now then
      if mode == '' then
        if ahead > 0 then break end
        redis.call('lpop', KEYS[3])
        redis.call('hdel', KEYS[4], owner)
        own(owner, ttl, fence)
        tell(client, owner, fence, now)
        return
      end
      if mode ~= 'r' and ahead >= tonumber(string.sub(mode, 2)) then break end
      redis.call('lpop', KEYS[3])
      redis.call('hdel', KEYS[4], owner)
      hold(owner, ttl, fence, mode, now)
      tell(client, owner, fence, now)
      ahead = ahead + 1
    else
      redis.call('lpop', KEYS[3])
      if entry then redis.call('hdel', KEYS[4], owner) end
    end
  end
  cover(now)
end
`;
