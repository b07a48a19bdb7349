import { MICROSECONDS_PER_FENCE } from '../fence-epoch-lua';
import { RedisScript } from '../redis-script';

/**
 * The scripts of the plain lock (docs/redis.md, "Protocol: plain"). The lock key holds what a
 * plain client understands: a value only its owner knows, with the lease as its PX expiry. Ours
 * is `<fence> <owner>`. KEYS: the lock key, its fence counter and its waiters
 * (redis-plain-keys.ts), which share a Cluster slot. Releases PUBLISH the lock key on RELEASE_CHANNEL, so that this library's
 * waiters in every process try again at once; plain clients publish nothing.
 */

/** Where this library's releases of plain locks are announced; the message is the lock key. */
export const RELEASE_CHANNEL = 'nest-distributed-lock:plain-released';

/**
 * The acquire reply: the fence of the grant, or `[pttl]` of the key someone else holds (-1: held
 * with no expiry, -2: gone since).
 */
export type PlainAcquireReply = number | [number];

/**
 * ARGV: owner, ttl (ms), and for a caller that waits the ms after which its waiter entry is
 * stale. `SET key value NX PX ttl`, as every plain client takes the lock; only then the fence is
 * counted, in the same script, so the counter's order is the order of grants; a counter made anew
 * starts at the epoch of the server's clock (fence-epoch-lua.ts). `%d` keeps a fence
 * above 1e14 in digits (Lua's own tostring would write it as 1e+14).
 */
export const plainAcquireScript = new RedisScript<PlainAcquireReply>(
  'plain-acquire',
  `
local fence = tonumber(redis.call('get', KEYS[2]))
if fence then fence = fence + 1 else
  local clock = redis.call('time')
  fence = math.floor((tonumber(clock[1]) * 1000000 + tonumber(clock[2])) / ${MICROSECONDS_PER_FENCE})
end
if not redis.call('set', KEYS[1], string.format('%d', fence) .. ' ' .. ARGV[1], 'NX', 'PX', ARGV[2]) then
  if ARGV[3] then
    local time = redis.call('time')
    redis.call('zadd', KEYS[3], time[1] * 1000 + math.floor(time[2] / 1000) + tonumber(ARGV[3]), ARGV[1])
  end
  return { redis.call('pttl', KEYS[1]) }
end
redis.call('set', KEYS[2], string.format('%d', fence))
redis.call('zrem', KEYS[3], ARGV[1])
return fence
`,
);

/** ARGV: the grant's value, the channel, the message. Compare-and-delete, then the announcement: 1 released, 0 not ours. */
export const plainReleaseScript = new RedisScript<0 | 1>(
  'plain-release',
  `
if redis.call('get', KEYS[1]) ~= ARGV[1] then return 0 end
redis.call('del', KEYS[1])
redis.call('publish', ARGV[2], ARGV[3])
return 1
`,
);

/** ARGV: the grant's value, ttl (ms). Compare-and-pexpire: 1 renewed, 0 no longer ours. */
export const plainRenewScript = new RedisScript<0 | 1>(
  'plain-renew',
  `
if redis.call('get', KEYS[1]) ~= ARGV[1] then return 0 end
redis.call('pexpire', KEYS[1], ARGV[2])
return 1
`,
);

/**
 * ARGV: owner, channel, message. Gives back whatever grant an acquire of `owner` took, its fence
 * unknown here (the acquire's reply never came, or came after its callers left).
 */
export const plainCancelScript = new RedisScript<0 | 1>(
  'plain-cancel',
  `
redis.call('zrem', KEYS[3], ARGV[1])
local value = redis.call('get', KEYS[1])
local suffix = ' ' .. ARGV[1]
if not value or string.sub(value, -#suffix) ~= suffix then return 0 end
redis.call('del', KEYS[1])
redis.call('publish', ARGV[2], ARGV[3])
return 1
`,
);

/**
 * The lock key's value ('' when free) and PTTL, the fence counter (0 when never granted), and
 * the number of this library's batches waiting (stale entries dropped first).
 */
export const plainInspectScript = new RedisScript<[string, number, number, number]>(
  'plain-inspect',
  `
local time = redis.call('time')
redis.call('zremrangebyscore', KEYS[3], '-inf', time[1] * 1000 + math.floor(time[2] / 1000))
return { redis.call('get', KEYS[1]) or '', redis.call('pttl', KEYS[1]), tonumber(redis.call('get', KEYS[2])) or 0, redis.call('zcard', KEYS[3]) }
`,
);

/** ARGV: channel, message. Deletes the lock whoever holds it: 1 deleted, 0 it was free. */
export const plainForceReleaseScript = new RedisScript<0 | 1>(
  'plain-force-release',
  `
if redis.call('del', KEYS[1]) == 0 then return 0 end
redis.call('publish', ARGV[1], ARGV[2])
return 1
`,
);
