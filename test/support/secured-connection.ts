import assert from 'node:assert/strict';
import { LockBackendError, type LockService } from '../../lib';

/**
 * Two clients of a secured server take, queue and hand over one lock: every connection the
 * backend makes (commands, and the waiter's wake-up: a subscription, watch or session) works with
 * the credentials under test.
 */
export async function handsOverSecured(first: LockService, second: LockService, name: string): Promise<void> {
  const held = await first.acquire(name, { waitTimeoutMs: 5_000 });
  const waiting = second.acquire(name, { waitTimeoutMs: 5_000 });
  await new Promise((resolve) => setTimeout(resolve, 100));
  assert.equal(await second.tryAcquire(name), null);
  await held.release();
  const next = await waiting;
  assert.ok(next.fencingToken > held.fencingToken, `${next.fencingToken} > ${held.fencingToken}`);
  await next.release();
}

/**
 * `call` fails with a LockBackendError whose message matches `says` and names `address`, within
 * `boundMs`; prints the measured time next to the bound.
 */
export async function refusedWithin(label: string, call: () => Promise<unknown>, says: RegExp, address: string, boundMs: number): Promise<void> {
  const started = performance.now();
  const error = await call().then(
    () => assert.fail(`${label}: succeeded without valid credentials`),
    (caught: unknown) => caught,
  );
  const elapsedMs = performance.now() - started;
  console.log(`${label}: failed in ${elapsedMs.toFixed(0)} ms (bound ${boundMs}): ${(error as Error).message}`);
  assert.ok(error instanceof LockBackendError, String(error));
  assert.match(error.message, says);
  assert.ok(error.message.includes(address), error.message);
  assert.ok(elapsedMs <= boundMs, `failed after ${elapsedMs} ms`);
}
