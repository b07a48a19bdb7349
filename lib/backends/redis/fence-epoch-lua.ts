/**
 * Fences a new counter starts from per second of the server's clock. A fence counter never
 * expires, so it is made anew only for a name's first grant or after the server lost its data;
 * starting it at `TIME seconds x 2^15` puts every fence of the new life above every fence of the
 * former one, unless a name averaged more than 32768 grants a second over the whole former life.
 * Entry tokens stay below 2^47 until the year 2106, so a token (`entry << 16 | turn`, batch.ts)
 * stays inside a signed 64-bit column. See docs/redis.md, "Fencing across restarts".
 */
export const FENCES_PER_SECOND = 32768;

/**
 * Lua: after `<fence> = INCR <counterKey>`, a counter that was just made (1) is moved to the
 * epoch of the server's clock. Inline, not a function: Lua makes a closure per function on every run.
 */
export function fenceEpochLua(fence: string, counterKey: string): string {
  return `if ${fence} == 1 then
  local clock = redis.call('time')
  ${fence} = tonumber(clock[1]) * ${FENCES_PER_SECOND}
  redis.call('set', ${counterKey}, string.format('%d', ${fence}))
end`;
}
