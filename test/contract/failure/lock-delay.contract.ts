import assert from 'node:assert/strict';
import { after, describe, it, type TestContext } from 'node:test';
import type { LockService } from '../../../lib';
import { HolderProcess } from '../../support/holder-process';
import { sleep } from '../../support/timing';
import { Services, describeError, settled, withinBound, type FailureContext } from './failure-target';

/** Small, so the case is quick: the holder's lease, and the delay after it ends unreleased. */
const TTL_MS = 1_000;
const LOCK_DELAY_MS = 1_500;
/**
 * Beyond the delay: the waiter being woken and granted once it ends (a watch, a safety net) on a
 * shared 2-core machine, and etcd's rounding (its delay lease adds whole seconds after 0.5 s for
 * its revoke loop: 1500 ms is held 2 to 2.5 s).
 */
const WAKE_BOUND_MS = 1_500;
/** A clean release must hand over "at once": well under the delay. */
const RELEASE_BOUND_MS = LOCK_DELAY_MS / 4;
/** How often the observer asks the server who holds the name: the precision of the lease's measured end. */
const POLL_MS = 20;

/** What the observer saw of the dead holder's lease at the server. */
interface LeaseEnd {
  /** performance.now() when the last inspect that still showed the holder was sent: the lease ended after it. */
  lastHeldAt: number;
  /** performance.now() when the first inspect that no longer showed it answered: the lease had ended by then. */
  goneAt: number;
}

/**
 * Lock-delay (issue 28): a holder whose lease runs out without a release (a crash, a pause) keeps
 * its name from everyone for `lockDelayMs` after the lease's end as the server sees it; a clean
 * release hands the name on at once. The lease's end is measured from outside, by asking the
 * server (inspect) until the holder is gone: the grant is checked against the last moment the
 * server still showed the holder, a time known to precede the lease's end.
 */
export function lockDelayCases(context: FailureContext): void {
  describe(`lock-delay (lockDelayMs ${LOCK_DELAY_MS}, ttlMs ${TTL_MS})`, () => {
    const services = new Services();
    let holder: HolderProcess | undefined;

    after(async () => {
      await holder?.stop();
      await services.closeAll();
    });

    const ending = context.options.serverless ? 'whose lease runs out unreleased (it stopped renewing)' : 'SIGKILLed';
    it(`a holder ${ending}: its name is granted no earlier than lockDelayMs after the lease ended`, { timeout: 30_000 }, async (t) => {
      const { backend } = context.target().direct;
      const key = context.newKey();
      // In process (memory), one service is the whole store: holder, waiter and observer share it.
      const waiter = await services.add({ backend, ttlMs: TTL_MS });
      const observer = context.options.serverless ? waiter : await services.add({ backend, ttlMs: TTL_MS });
      await holder?.stop();
      const { fencingToken, end } = await holdWithDelay(context, waiter, key, (process) => (holder = process));
      const waiting = waiter.acquire(key, { waitTimeoutMs: 20_000 });
      // Queued behind a holder that renews at least once: the crash strikes a working holder.
      await sleep(TTL_MS / 2);
      const since = performance.now();
      end();
      const leaseEnd = await watchLeaseEnd(observer, key, fencingToken, 15_000);
      const granted = await settled(waiting, since, 20_000);
      assert.equal(granted.error, undefined, `the waiter got no lock: ${describeError(granted.error)}`);
      const grantedAt = since + granted.ms;
      report(t, leaseEnd, grantedAt);
      assert.ok(
        grantedAt - leaseEnd.lastHeldAt >= LOCK_DELAY_MS,
        `granted ${Math.round(grantedAt - leaseEnd.lastHeldAt)} ms after the server last showed the holder, under lockDelayMs ${LOCK_DELAY_MS}`,
      );
      withinBound(t, 'granted after the lease was seen gone', grantedAt - leaseEnd.goneAt, LOCK_DELAY_MS + WAKE_BOUND_MS);
      assert.ok(granted.value!.fencingToken > fencingToken, `token ${granted.value!.fencingToken} after the dead holder's ${fencingToken}`);
      await granted.value!.release();
    });

    it('a clean release hands the name to the next waiter at once, with no delay', { timeout: 30_000 }, async (t) => {
      const { backend } = context.target().direct;
      const key = context.newKey();
      const waiter = await services.add({ backend, ttlMs: TTL_MS });
      let release: () => Promise<void>;
      if (context.options.serverless) {
        const lock = await waiter.acquire(key, { lockDelayMs: LOCK_DELAY_MS });
        release = () => lock.release();
      } else {
        await holder?.stop();
        const process = (holder = await HolderProcess.withModule({ backend, ttlMs: TTL_MS, lockDelayMs: LOCK_DELAY_MS }));
        await process.acquire(key);
        release = () => process.release();
      }
      const waiting = waiter.acquire(key, { waitTimeoutMs: 20_000 });
      // Queued behind the holder, which renews at least once: the release ends a working lease.
      await sleep(TTL_MS / 2);
      const releasedAt = performance.now();
      await release();
      const granted = await settled(waiting, releasedAt, 20_000);
      assert.equal(granted.error, undefined, `the waiter got no lock: ${describeError(granted.error)}`);
      withinBound(t, `granted after the clean release (lockDelayMs ${LOCK_DELAY_MS})`, granted.ms, RELEASE_BOUND_MS);
      await granted.value!.release();
    });
  });
}

/**
 * A holder with the lock-delay takes `key`; `end` makes its lease end unreleased: a holder
 * process is SIGKILLed; in process (memory), a lock that `service` took without renewal is
 * never released.
 */
async function holdWithDelay(
  context: FailureContext,
  service: LockService,
  key: string,
  started: (process: HolderProcess) => void,
): Promise<{ fencingToken: bigint; end: () => void }> {
  const { backend } = context.target().direct;
  if (context.options.serverless) {
    const lock = await service.acquire(key, { renew: false, lockDelayMs: LOCK_DELAY_MS });
    return { fencingToken: lock.fencingToken, end: () => undefined };
  }
  const process = await HolderProcess.withModule({ backend, ttlMs: TTL_MS, lockDelayMs: LOCK_DELAY_MS });
  started(process);
  const { fencingToken } = await process.acquireTimed(key);
  return { fencingToken, end: () => process.kill('SIGKILL') };
}

/** Asks the server who holds `key` every POLL_MS until the holder of `fencingToken` is gone. */
async function watchLeaseEnd(observer: LockService, key: string, fencingToken: bigint, limitMs: number): Promise<LeaseEnd> {
  const started = performance.now();
  let lastHeldAt = started;
  while (performance.now() - started < limitMs) {
    const sentAt = performance.now();
    const view = await observer.inspect(key);
    const stillHeld = (view.holders ?? (view.holder ? [view.holder] : [])).some((holder) => holder.fencingToken === fencingToken);
    if (!stillHeld) return { lastHeldAt, goneAt: performance.now() };
    lastHeldAt = sentAt;
    await sleep(POLL_MS);
  }
  throw new Error(`the server still showed the holder of token ${fencingToken} after ${limitMs} ms`);
}

function report(t: TestContext, leaseEnd: LeaseEnd, grantedAt: number): void {
  const after = Math.round(grantedAt - leaseEnd.lastHeldAt);
  const precision = Math.round(leaseEnd.goneAt - leaseEnd.lastHeldAt);
  t.diagnostic(`granted ${after} ms after the lease's end (measured to within ${precision} ms; lockDelayMs ${LOCK_DELAY_MS} is the lower bound)`);
}
