import { LockConfigError } from '../../errors';
import type { AcquireRequest } from '../lock-backend.interface';
import { COMMON } from './redis-lock-scripts';
import { MODE_LUA } from './redis-mode-lua';
import { RedisScript } from './redis-script';
import { lifeCheckLua, type LifeReply } from './server-life-scripts';

/*
 * The scripts of read and permit entries: a read entry stands for a batch of one process's
 * readers, a permit entry for one caller. KEYS: the five of redis-keys.ts; MODE_LUA describes the
 * layout. Every script that frees a place re-evaluates the head of the queue (grant_queue), so a
 * waiter is told by a message and never polls.
 */
const MODES = COMMON + MODE_LUA;

/** When the answer may change without a release: the earliest lease end of whoever holds, or -1. */
const NEXT_CHANGE = `
local function next_change(now)
  if writer_holds() then return blocked_pttl() end
  local first = redis.call('zrange', HOLDERS, 0, 0, 'withscores')
  if #first == 0 then return -1 end
  return tonumber(first[2]) - now
end
`;

/** The mode acquire script's reply: see modeAcquireScript. */
export type ModeAcquireReply = number | [0, number] | [0, number, string, number] | [-1, string] | LifeReply;

/** A read or permit entry's mode as the scripts take it: 'r', or 'p<limit>'. */
export function scriptMode({ mode, limit }: Pick<AcquireRequest, 'mode' | 'limit'>): string {
  return mode === 'read' ? 'r' : `p${limit}`;
}

/** The acquire script's {-1, other}: a permit of `key` with limit `limit` met one with limit `other`. */
export function limitRefused(key: string, limit: number | undefined, other: string): LockConfigError {
  return new LockConfigError('limit', `a semaphore "${key}" with limit ${limit} was asked for while a permit of it with limit ${other} is held or queued; every permit of a name must give the same limit.`);
}

/**
 * ARGV: owner, ttlMs, mode ('r' or 'p<limit>'), and when the caller may queue '<staleAfterMs> <clientId>'.
 * Reply: the fence when granted; {0, nextChangeMs} when it may not go and may not queue;
 * {0, nextChangeMs, fence, serverMs} when queued; {-1, limit} when a permit of the name, held
 * or queued, has another limit (held permits are looked at first; the queue only when none holds).
 */
export const modeAcquireScript = new RedisScript<ModeAcquireReply>(
  'acquire (mode)',
  `${lifeCheckLua(6, 'ARGV[2]')}${MODES}${NEXT_CHANGE}
local owner, ttl, mode = ARGV[1], ARGV[2], ARGV[3]
local now = now_ms()
-- Leases that ran out and entries that may go are settled first: they change this entry's answer.
if not writer_holds() then grant_queue(now) end
if string.sub(mode, 1, 1) == 'p' then
  local seen = false
  for _, grant in ipairs(redis.call('hvals', GRANTS)) do
    local other = string.match(grant, '^%d+ (p%d+) ')
    if other then
      if other ~= mode then return {-1, string.sub(other, 2)} end
      seen = true
      break
    end
  end
  if not seen then
    for _, entry in ipairs(redis.call('hvals', KEYS[4])) do
      local other = string.match(entry, ' (p%d+)$')
      if other and other ~= mode then return {-1, string.sub(other, 2)} end
    end
  end
end
local fence = next_fence()
if not writer_holds() and redis.call('llen', KEYS[3]) == 0 then
  if mode == 'r' or redis.call('zcard', HOLDERS) < tonumber(string.sub(mode, 2)) then
    hold(owner, ttl, fence, mode, now)
    cover(now)
    return tonumber(fence)
  end
end
if not ARGV[4] then return {0, next_change(now)} end
local stale_after, client = string.match(ARGV[4], '^(%d+) (%S+)$')
redis.call('rpush', KEYS[3], owner)
redis.call('hset', KEYS[4], owner, ttl .. ' ' .. client .. ' ' .. fence .. ' ' .. mode)
mark_alive(client, tonumber(stale_after), now)
return {0, next_change(now), fence, now}
`,
);

/** ARGV: '<fence> <owner>'. Reply: 1 released (and the entries that may go now granted), 0 not ours. */
export const modeReleaseScript = new RedisScript<0 | 1>(
  'release (mode)',
  `${MODES}
local fence, owner = split(ARGV[1])
local grant = redis.call('hget', GRANTS, owner)
if not grant or string.match(grant, '^%d+') ~= fence then return 0 end
redis.call('zrem', HOLDERS, owner)
redis.call('hdel', GRANTS, owner)
if not writer_holds() then grant_queue(now_ms()) end
return 1
`,
);

/** ARGV: '<fence> <owner>', ttlMs. Reply: 1 extended, 0 not ours (or its lease ran out: others may hold). */
export const modeRenewScript = new RedisScript<0 | 1>(
  'renew (mode)',
  `${MODES}
local fence, owner = split(ARGV[1])
local grant = redis.call('hget', GRANTS, owner)
if not grant or string.match(grant, '^%d+') ~= fence then return 0 end
local now = now_ms()
local ends = tonumber(redis.call('zscore', HOLDERS, owner))
if not ends or ends < now or writer_holds() then return 0 end
redis.call('zadd', HOLDERS, now + tonumber(ARGV[2]), owner)
cover(now)
return 1
`,
);

/**
 * A waiter gave up: its entry leaves the queue, a grant that raced is given back, and the
 * entries it held up are granted. ARGV: owner. Reply: 1 when it had been granted.
 */
export const modeCancelScript = new RedisScript<0 | 1>(
  'cancel (mode)',
  `${MODES}
redis.call('hdel', KEYS[4], ARGV[1])
local granted = redis.call('hdel', GRANTS, ARGV[1])
redis.call('zrem', HOLDERS, ARGV[1])
if not writer_holds() then grant_queue(now_ms()) end
return granted
`,
);

/**
 * The safety net for read and permit waiters (as checkScript for writes): keeps this process's
 * waiters alive, settles ended leases and dead entries, finds grants whose message was lost and
 * puts back entries that vanished. ARGV: clientId, staleAfterMs, then owner, ttlMs, mode triples.
 * Reply: {nextChangeMs, {owner, fence, grantedAtMs, ...} of the local waiters that hold,
 * {owner, ...} of those put back, serverMs}.
 */
export const modeCheckScript = new RedisScript<[number, string[], string[], number] | LifeReply>(
  'check (mode)',
  `${lifeCheckLua(6, undefined, 'quarantined')}${MODES}${NEXT_CHANGE}
local now = now_ms()
mark_alive(ARGV[1], tonumber(ARGV[2]), now)
-- Closed to new grants (quarantined): only those made already (a release's hand-off) are reported.
if not quarantined and not writer_holds() then grant_queue(now) end
local granted, requeued = {}, {}
for i = 3, #ARGV, 3 do
  local owner = ARGV[i]
  local grant = redis.call('hget', GRANTS, owner)
  -- A grant whose lease ran out before its process heard of it is no grant: the entry queues again.
  if grant and (tonumber(redis.call('zscore', HOLDERS, owner)) or 0) < now then grant = nil end
  if grant then
    local fence, _, granted_at = string.match(grant, '^(%d+) (%S+) (%d+)$')
    granted[#granted + 1] = owner
    granted[#granted + 1] = fence
    granted[#granted + 1] = granted_at
  elseif not quarantined and redis.call('hexists', KEYS[4], owner) == 0 then
    redis.call('rpush', KEYS[3], owner)
    redis.call('hset', KEYS[4], owner, ARGV[i + 1] .. ' ' .. ARGV[1] .. ' ' .. next_fence() .. ' ' .. ARGV[i + 2])
    requeued[#requeued + 1] = owner
  end
end
if quarantined and #granted == 0 then return quarantined end
if #requeued > 0 and not writer_holds() then grant_queue(now) end
return {next_change(now), granted, requeued, now}
`,
);

/**
 * KEYS: the five. Reply: {owner key value or '', its pttl, live waiters, {owner, fence, mode,
 * grantedAtMs, leaseEndMs, ...} of the live read or permit holders, serverMs}. O(waiters + holders):
 * for an operator's look, not a hot path. Changes nothing.
 */
export const inspectScript = new RedisScript<[string, number, number, string[], number]>(
  'inspect',
  `${MODES}
local now = now_ms()
local alive, waiting = {}, 0
local entries = redis.call('hgetall', KEYS[4])
for i = 2, #entries, 2 do
  local _, client = parse_any(entries[i])
  if client then
    if alive[client] == nil then alive[client] = tonumber(redis.call('hget', KEYS[5], client) or '0') end
    if alive[client] >= now then waiting = waiting + 1 end
  end
end
local holders = {}
local value = redis.call('get', KEYS[1])
if value == SHARED then
  local live = redis.call('zrangebyscore', HOLDERS, now, '+inf', 'withscores')
  for i = 1, #live, 2 do
    local fence, mode, granted_at = string.match(redis.call('hget', GRANTS, live[i]) or '', '^(%d+) (%S+) (%d+)$')
    if fence then
      for _, field in ipairs({live[i], fence, mode, granted_at, live[i + 1]}) do holders[#holders + 1] = field end
    end
  end
end
return {value or '', redis.call('pttl', KEYS[1]), waiting, holders, now}
`,
);

/**
 * KEYS: the five. Removes every holder, whatever its mode; the entries that may go then are
 * granted by a message, as at any release. Reply: 1 removed a holder, 0 free.
 */
export const forceReleaseScript = new RedisScript<0 | 1>(
  'force-release',
  `${MODES}
local value = redis.call('get', KEYS[1])
if not value then return 0 end
if value ~= SHARED then
  -- An operator's release, as the holder's own: its lock-delay ends with it.
  redis.call('del', DELAY)
  hand_off(true)
  return 1
end
redis.call('del', HOLDERS, GRANTS, KEYS[1])
grant_queue(now_ms())
return 1
`,
);
