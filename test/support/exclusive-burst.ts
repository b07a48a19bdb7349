import assert from 'node:assert/strict';
import { setImmediate as tick } from 'node:timers/promises';
import type { LockService } from '../../lib';
import { assertExclusive, type HoldInterval } from './timing';

/**
 * Runs `keys.length` callers at once (caller i through service i % n), each through withLock
 * with the module's default waitTimeoutMs; asserts none failed and that each key had one holder
 * at a time with tokens rising in hold order. Resolves to the burst's makespan in ms.
 */
export async function exclusiveBurst(keys: readonly string[], through: readonly LockService[]): Promise<number> {
  const intervals = new Map<string, HoldInterval[]>();
  const inside = new Map<string, number>();
  const started = performance.now();
  const results = await Promise.allSettled(
    keys.map((key, i) =>
      through[i % through.length].withLock(key, async (lock) => {
        const start = process.hrtime.bigint();
        inside.set(key, (inside.get(key) ?? 0) + 1);
        assert.equal(inside.get(key), 1, 'two holders inside at once');
        await tick();
        inside.set(key, 0);
        const list = intervals.get(key) ?? [];
        list.push({ start, end: process.hrtime.bigint(), fencingToken: lock.fencingToken, holder: `caller ${i}` });
        intervals.set(key, list);
      }),
    ),
  );
  const elapsedMs = Math.round(performance.now() - started);
  const errors = results.filter((result) => result.status === 'rejected').map((result) => String((result as PromiseRejectedResult).reason));
  assert.deepEqual(errors.slice(0, 3), [], `${errors.length} of ${keys.length} callers failed`);
  for (const list of intervals.values()) assertExclusive(list);
  return elapsedMs;
}
