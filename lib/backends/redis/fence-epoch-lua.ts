/**
 * A counter made anew starts at the server's clock in units of this many microseconds. A fence
 * counter never expires, so it is made anew only for a name's first grant or after the server
 * lost its data; starting it at `TIME / 32 µs` puts every fence of the new life above every fence
 * of the former one, unless a name averaged more than one grant per 32 µs (31250 a second) over
 * the whole former life and the restart. Microseconds, not seconds: a life shorter than a second
 * (a crash soon after a first grant) would otherwise start the new counter below the old one.
 * Entry fences stay below 2^47 until the year 2112, so a token (`entry << 16 | turn`, batch.ts)
 * stays inside a signed 64-bit column. See docs/redis.md, "Fencing tokens".
 */
export const MICROSECONDS_PER_FENCE = 32;

/**
 * Lua: after `<fence> = INCR <counterKey>`, a counter that was just made (1), or one at or below
 * the life marker's fence floor (a counter a promoted replica had from before the failover:
 * `fence_floor`, set by lifeCheckLua, which every script that takes a fence begins with), is
 * moved to the epoch of the server's clock, and above the floor. Inline, not a function: Lua
 * makes a closure per function on every run.
 */
export function fenceEpochLua(fence: string, counterKey: string): string {
  return `if ${fence} == 1 or ${fence} <= fence_floor then
  local clock = redis.call('time')
  ${fence} = math.max(fence_floor + 1, math.floor((tonumber(clock[1]) * 1000000 + tonumber(clock[2])) / ${MICROSECONDS_PER_FENCE}))
  redis.call('set', ${counterKey}, string.format('%d', ${fence}))
end`;
}
