import assert from 'node:assert/strict';
import { setImmediate as tick } from 'node:timers/promises';
import { after, describe, it } from 'node:test';
import { DEFAULT_WAIT_TIMEOUT_MS, type LockService } from '../../../lib';
import { assertExclusive, type HoldInterval } from '../../support/timing';
import { GRACE_MS, Services, describeError, settled, withinBound, type FailureContext } from './failure-target';

const CALLERS = 1_000;

/**
 * Contract point 5: a burst in one process is absorbed. Every call uses the module's defaults,
 * so each must end within the default waitTimeoutMs, and none may fail.
 */
export function burstCases(context: FailureContext): void {
  describe(`a burst of ${CALLERS} concurrent acquisitions in one process`, () => {
    const services = new Services();
    after(() => services.closeAll());

    it(`of one key: zero errors, within waitTimeoutMs (${DEFAULT_WAIT_TIMEOUT_MS})`, { timeout: 25_000 }, async (t) => {
      const service = await services.add({ backend: context.target().direct.backend });
      const key = context.newKey();
      const intervals: HoldInterval[] = [];
      let inside = 0;
      const { ms, errors } = await burst(service, () => key, async (lock) => {
        const start = process.hrtime.bigint();
        assert.equal(++inside, 1, 'two holders inside at once');
        await tick();
        inside--;
        intervals.push({ start, end: process.hrtime.bigint(), fencingToken: lock.fencingToken, holder: `caller ${intervals.length}` });
      });
      reportErrors(t, errors);
      withinBound(t, `${CALLERS} callers of one key`, ms, DEFAULT_WAIT_TIMEOUT_MS);
      assert.equal(errors.length, 0, `${errors.length} of ${CALLERS} calls failed`);
      assert.equal(intervals.length, CALLERS);
      if (context.options.fencing !== false) assertExclusive(intervals);
    });

    it(`of distinct keys: zero errors, within waitTimeoutMs (${DEFAULT_WAIT_TIMEOUT_MS})`, { timeout: 25_000 }, async (t) => {
      const service = await services.add({ backend: context.target().direct.backend });
      const prefix = context.newKey();
      let ran = 0;
      const { ms, errors } = await burst(service, (i) => `${prefix}-${i}`, async () => {
        await tick();
        ran++;
      });
      reportErrors(t, errors);
      withinBound(t, `${CALLERS} callers of distinct keys`, ms, DEFAULT_WAIT_TIMEOUT_MS);
      assert.equal(errors.length, 0, `${errors.length} of ${CALLERS} calls failed`);
      assert.equal(ran, CALLERS);
    });
  });
}

async function burst(
  service: LockService,
  keyOf: (i: number) => string,
  section: (lock: { fencingToken: bigint }) => Promise<void>,
): Promise<{ ms: number; errors: unknown[] }> {
  const started = performance.now();
  const all = Promise.allSettled(Array.from({ length: CALLERS }, (_, i) => service.withLock(keyOf(i), section)));
  const { ms, value: results, error } = await settled(all, started, DEFAULT_WAIT_TIMEOUT_MS + GRACE_MS);
  if (error) return { ms, errors: [error] };
  return { ms, errors: results!.filter((result) => result.status === 'rejected').map((result) => (result as PromiseRejectedResult).reason) };
}

/** The kinds of error and one message of each, so a failure says what went wrong without 1000 lines. */
function reportErrors(t: { diagnostic(message: string): void }, errors: unknown[]): void {
  const byKind = new Map<string, { count: number; example: string }>();
  for (const error of errors) {
    const kind = error instanceof Error ? error.name : typeof error;
    const seen = byKind.get(kind) ?? { count: 0, example: describeError(error) };
    seen.count++;
    byKind.set(kind, seen);
  }
  for (const [kind, { count, example }] of byKind) t.diagnostic(`${count} x ${kind}, e.g. ${example}`);
}
