import { MICROSECONDS_PER_FENCE } from './fence-epoch-lua';
import { RedisScript } from './redis-script';

/*
 * A Redis server's "life": the span of one dataset. A server restarted without persistence
 * starts a new life with no locks in it while the holders of its former life still believe they
 * hold theirs. The life marker (a hash that never expires) tells the two apart: it is written
 * with the first grant of a life, so a process that saw it and finds it gone knows the data was
 * lost, and closes the server to grants for as long as a lease of the former life may last
 * (server-life.ts). See docs/redis.md, "A restart without the data".
 */

/**
 * The marker: `id` (random, per life), `ttl` (the longest ttl asked for in this life, ms),
 * during a quarantine `until` (the server's time, ms, before which nothing is granted) and, once
 * a quarantine began, `floor` (the fence epoch then, fence-epoch-lua.ts: no fence is given at or below it).
 * One per server, so a loss noticed on any name closes every name; on Redis Cluster a script may
 * touch one slot only, so there the scripts are given no marker and skip the check.
 */
export const LIFE_KEY = 'nest-distributed-lock:life';

/** The grant scripts' reply when the life check refused: no marker, or a quarantine with `leftMs` to go. */
export type LifeReply = [-2, 0, -2] | [-3, 0, number];

/** The reply is the life check's, not the script's own (no grant script replies a number pair starting below -1). */
export function lifeReply(reply: unknown): LifeReply | undefined {
  if (!Array.isArray(reply) || (reply[0] !== -2 && reply[0] !== -3) || typeof reply[1] !== 'number') return undefined;
  return reply as LifeReply;
}

/**
 * Lua, first in every script that may grant: refuses while the marker is missing ({-2, 0, -2}:
 * the client decides whether that is a first boot or a loss) or a quarantine runs ({-3, 0,
 * leftMs}); records `ttl` (a Lua expression, when the script is given one) as the life's longest;
 * sets `fence_floor` (declared here for the whole script, 0 without a marker) for fenceEpochLua.
 * With `quarantined` (a name), a quarantine's refusal is put in that local instead of returned:
 * a safety check still reports a grant made already (a release's hand-off) and keeps its
 * waiters alive, and grants nothing new. One HMGET in the common case. The reply's shape is a
 * refused Redlock vote's ({0, fence, pttl}), so a vote counts it as a refusal that frees in `leftMs`.
 */
export function lifeCheckLua(keyIndex: number, ttl?: string, quarantined?: string): string {
  const life = `KEYS[${keyIndex}]`;
  const record = ttl ? `\n  if tonumber(life[1]) < tonumber(${ttl}) then redis.call('hset', ${life}, 'ttl', ${ttl}) end` : '';
  const refuse = quarantined ? `${quarantined} = {-3, 0, left}` : 'return {-3, 0, left}';
  return `local fence_floor = 0${quarantined ? `\nlocal ${quarantined}` : ''}
if ${life} then
  local life = redis.call('hmget', ${life}, 'ttl', 'until', 'floor')
  if not life[1] then return {-2, 0, -2} end
  if life[3] then fence_floor = tonumber(life[3]) end
  if life[2] then
    local clock = redis.call('time')
    local left = tonumber(life[2]) - (tonumber(clock[1]) * 1000 + math.floor(tonumber(clock[2]) / 1000))
    if left > 0 then ${refuse} else redis.call('hdel', ${life}, 'until') end
  end${record}
end
`;
}

/** ARGV: a new life id, the ttl asked for. Writes the marker unless there is one; replies {id, ttl} of the marker. */
export const beginLifeScript = new RedisScript<[string, string]>(
  'begin a life',
  `if redis.call('hsetnx', KEYS[1], 'id', ARGV[1]) == 1 then redis.call('hset', KEYS[1], 'ttl', ARGV[2]) end
return redis.call('hmget', KEYS[1], 'id', 'ttl')`,
);

/** Replies {id, ttl} of the marker (nil each when there is none). */
export const readLifeScript = new RedisScript<[string | null, string | null]>('read the life marker', `return redis.call('hmget', KEYS[1], 'id', 'ttl')`);

/**
 * After a reconnection: {id, ttl} of the marker (nil each when there is none), then the server's
 * `master_replid` and `master_replid2` (nil each when INFO is refused, or on a Redis before 4.0).
 * One round trip: INFO runs inside the script.
 */
export const reconnectedScript = new RedisScript<[string | null, string | null, string | null, string | null]>(
  'check the server after reconnecting',
  `local life = redis.call('hmget', KEYS[1], 'id', 'ttl')
local info = redis.pcall('info', 'replication')
if type(info) ~= 'string' then return {life[1], life[2]} end
return {life[1], life[2], string.match(info, 'master_replid:(%x+)'), string.match(info, 'master_replid2:(%x+)')}`,
);

/**
 * A process that knew the life `ARGV[1]` found it gone ('': found a server whose history is not
 * the one it saw, a failover). ARGV: that id, a new life id, the quarantine (ms). Unless the
 * marker still names the known life, no grant goes out for the quarantine from now (a later
 * quarantine only ever extends an earlier one), under the marker found or a new one, and no
 * fence at or below the epoch of now (a promoted replica's counters may lag the old primary's).
 * Replies {id of the life now, ms of quarantine left}.
 */
export const quarantineScript = new RedisScript<[string, number]>(
  'close a restarted server to grants',
  `local life = redis.call('hmget', KEYS[1], 'id', 'until', 'ttl', 'floor')
if life[1] == ARGV[1] then return {life[1], 0} end
local clock = redis.call('time')
local now = tonumber(clock[1]) * 1000 + math.floor(tonumber(clock[2]) / 1000)
local floor = math.floor((tonumber(clock[1]) * 1000000 + tonumber(clock[2])) / ${MICROSECONDS_PER_FENCE})
local until_ms = math.max(tonumber(life[2] or '0'), now + tonumber(ARGV[3]))
local ttl = math.max(tonumber(life[3] or '0'), tonumber(ARGV[3]))
local id = life[1] or ARGV[2]
redis.call('hset', KEYS[1], 'id', id, 'until', string.format('%d', until_ms), 'ttl', string.format('%d', ttl),
  'floor', string.format('%d', math.max(tonumber(life[4] or '0'), floor)))
return {id, until_ms - now}`,
);
