import { batchToken } from '../local-queue/batch';
import type { LockInspection } from '../lock-backend.interface';
import type { RedisConnections } from './redis-connection';
import { lockKeys } from './redis-keys';
import { COMMON } from './redis-lock-scripts';
import { RedisScript } from './redis-script';

/**
 * KEYS: the five of redis-keys.ts. Reply: {'<fence> <owner>' or '', owner pttl, live waiters}.
 * A waiter counts while its process's alive deadline has not passed (as hand_off decides). The
 * waiters hash is read whole: O(waiters), fine for an operator's look, not for a hot path.
 */
const inspectScript = new RedisScript<[string, number, number]>(
  'inspect',
  `local t = redis.call('time')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local entries = redis.call('hgetall', KEYS[4])
local alive, waiting = {}, 0
for i = 2, #entries, 2 do
  local client = string.match(entries[i], '^%d+ (%S+) %d+$')
  if client then
    if alive[client] == nil then alive[client] = tonumber(redis.call('hget', KEYS[5], client) or '0') end
    if alive[client] >= now then waiting = waiting + 1 end
  end
end
return {redis.call('get', KEYS[1]) or '', redis.call('pttl', KEYS[1]), waiting}
`,
);

/** KEYS: the five. Hands the lock to the next live waiter, whoever holds it. Reply: 1 removed a holder, 0 free. */
const forceReleaseScript = new RedisScript<0 | 1>(
  'force-release',
  `if redis.call('exists', KEYS[1]) == 0 then return 0 end
${COMMON}
hand_off()
return 1
`,
);

/**
 * The owner key's value and expiry, and the live queue entries. One entry stands for a batch of
 * one process's callers (LocalQueues), so `waiting` counts entries, not callers. The token is the
 * entry's fence as a batch token of its first turn: what the server records (later turns of the
 * same entry are handed over in the holder's process, and their tokens are higher).
 */
export async function inspectRedisLock(connections: RedisConnections, key: string): Promise<LockInspection> {
  const [value, pttlMs, waiting] = await connections.runScript(inspectScript, lockKeys(key).all, [], 'inspect', key);
  const space = value.indexOf(' ');
  if (space === -1) return { held: false, waiting };
  const holder = { owner: value.slice(space + 1), fencingToken: batchToken(BigInt(value.slice(0, space)), 0n) };
  return { held: true, holder: pttlMs >= 0 ? { ...holder, expiresInMs: pttlMs } : holder, waiting };
}

/** The release script without its owner check: the next live waiter is granted, by a message, as at any release. */
export async function forceReleaseRedisLock(connections: RedisConnections, key: string): Promise<boolean> {
  return (await connections.runScript(forceReleaseScript, lockKeys(key).all, [], 'force the release of', key)) === 1;
}
