/**
 * Lock-delay in the Redis scripts (README, "Lock-delay"). A holder that asked for one keeps a
 * second key, '{tag}:delay', beside the owner key: set with every grant and renewal of its lease
 * to PX ttl + lockDelayMs in the same script, so in Redis's own clock it outlives the owner key by
 * exactly the delay, and deleted by a release. While it exists without the owner key, the holder's
 * lease ran out unreleased less than the delay ago: no script grants the name, and waiters'
 * safety checks are scheduled for its PTTL. Entries without a delay never write it; scripts only
 * look for it, a read, so the hot path gains no write and no round trip.
 *
 * A write entry's lease, as the scripts carry it (acquire ARGV[2], the waiters hash, check pairs):
 * '<ttlMs>' or, with a lock-delay, '<ttlMs>d<lockDelayMs>'.
 */

/** The delay key's name, from the owner key's ('{tag}:owner'): same hash tag, same Cluster slot. */
export const DELAY_KEY_LUA = `string.sub(KEYS[1], 1, -6) .. 'delay'`;

/** For scripts that include the lock's functions (redis-lock-scripts.ts HANDING). */
export const DELAY_LUA = `
local DELAY = ${DELAY_KEY_LUA}

-- '<ttl>' or '<ttl>d<delay>' -> ttl, delay (nil without one).
local function lease_of(field)
  local ttl, delay = string.match(field, '^(%d+)d(%d+)$')
  if ttl then return ttl, tonumber(delay) end
  return field, nil
end

-- A holder's lease ran out unreleased less than its lock-delay ago.
local function delayed()
  return redis.call('exists', DELAY) == 1 and redis.call('exists', KEYS[1]) == 0
end

-- Until when nobody may be granted: the holder's PTTL, else a running delay's, else -2.
local function blocked_pttl()
  local pttl = redis.call('pttl', KEYS[1])
  if pttl >= 0 then return pttl end
  return redis.call('pttl', DELAY)
end
`;

/** A write entry's lease as the scripts carry it (see above). */
export function leaseField(ttlMs: number, lockDelayMs: number): string | number {
  return lockDelayMs > 0 ? `${ttlMs}d${Math.ceil(lockDelayMs)}` : ttlMs;
}
