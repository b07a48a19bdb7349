import assert from 'node:assert/strict';
import { after, describe, it } from 'node:test';
import type { LockService } from '../../../lib';
import { HolderProcess } from '../../support/holder-process';
import { sleep } from '../../support/timing';
import { Services, describeError, settled, withinBound, type FailureContext } from './failure-target';

/** The module's ttlMs in the holder: what bounds how long its crash blocks others. */
const TTL_MS = 1_500;
/**
 * Beyond ttlMs: the server noticing the lease (or session) ran out, a lease rounded up to whole
 * seconds (etcd), and the hand-over to the waiter.
 */
const FAILOVER_BOUND_MS = 1_500;

/** Contract point 4: a holder process that dies blocks the lock for at most its module's ttlMs plus a bound. */
export function crashFailoverCases(context: FailureContext): void {
  describe('holder process SIGKILLed while holding', () => {
    const services = new Services();
    let holder: HolderProcess | undefined;

    after(async () => {
      await holder?.stop();
      await services.closeAll();
    });

    /** What the dead holder held, and what the waiter asks for: the lock, a read lock, a semaphore's only permit. */
    const kinds = [
      { what: 'lock', hold: {}, wait: (service: LockService, key: string) => service.acquire(key, { waitTimeoutMs: 20_000 }) },
      { what: 'read lock', hold: { mode: 'read' as const }, wait: (service: LockService, key: string) => service.acquire(key, { waitTimeoutMs: 20_000 }), modes: true },
      { what: "semaphore's permit", hold: { limit: 1 }, wait: (service: LockService, key: string) => service.acquireSemaphore(key, 1, { waitTimeoutMs: 20_000 }), modes: true },
    ];
    for (const kind of kinds) {
      const skip = kind.modes && context.options.modes === false ? 'the backend grants only the exclusive lock' : false;
      it(`a dead holder's ${kind.what}: a waiter in another client is granted within ttlMs (${TTL_MS}) + ${FAILOVER_BOUND_MS} ms`, { timeout: 30_000, skip }, async (t) => {
        const { backend } = context.target().direct;
        const key = context.newKey();
        await holder?.stop();
        holder = await HolderProcess.withModule({ backend, ttlMs: TTL_MS });
        const held = await holder.acquireTimed(key, kind.hold);
        const waiter = await services.add({ backend, ttlMs: TTL_MS });
        let settledEarly = false;
        const waiting = kind.wait(waiter, key);
        waiting.then(
          () => (settledEarly = true),
          () => (settledEarly = true),
        );
        // Queued, and the holder has renewed its lease at least once: the crash strikes a working holder.
        await sleep(TTL_MS / 2);
        assert.equal(settledEarly, false, 'the waiter did not wait for the live holder');
        const killedAt = performance.now();
        holder.kill('SIGKILL');
        const bound = TTL_MS + FAILOVER_BOUND_MS;
        // Waited for well past the bound, so that a backend over it shows by how much.
        const granted = await settled(waiting, killedAt, bound + 10_000);
        t.diagnostic(`the waiter's acquire ended with ${describeError(granted.error ?? `token ${granted.value?.fencingToken}`)}`);
        withinBound(t, 'granted after the holder was killed', granted.ms, bound);
        assert.equal(granted.error, undefined, `the waiter got no lock: ${describeError(granted.error)}`);
        if (context.options.fencing !== false) {
          assert.ok(granted.value!.fencingToken > held.fencingToken, `token ${granted.value!.fencingToken} after the dead holder's ${held.fencingToken}`);
        }
        await granted.value!.release();
      });
    }
  });
}
