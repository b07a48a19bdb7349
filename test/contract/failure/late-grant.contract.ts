import assert from 'node:assert/strict';
import { after, before, describe, it, type TestContext } from 'node:test';
import { LockLostError } from '../../../lib';
import { HolderProcess, type HolderEvent } from '../../support/holder-process';
import { assertExclusive, sleep, type HoldInterval } from '../../support/timing';
import { Services, bounded, describeError, withinBound, type FailureContext } from './failure-target';

/** The module's ttlMs in every process: the paused waiter's lease runs out this long after it is granted. */
const TTL_MS = 1_500;
/** Long enough for a request to reach the server and be queued there. */
const QUEUE_MS = 500;
/** How long the next holder's critical section lasts: the paused waiter resumes in its middle. */
const NEXT_HOLD_MS = 3_000;
/** From the release to the next waiter's grant: the paused waiter's lease (or session) runs out first. */
const HAND_ON_BOUND_MS = TTL_MS + 3_000;

/**
 * Contract point 7: a grant that reaches a waiter late is never a fresh lease. A waiter is paused
 * (SIGSTOP) while queued; the holder releases, so the paused waiter is granted; its lease runs
 * out and the next waiter is granted; then the paused one resumes. It must not run its critical
 * section as holder beside the next one: the holds of all processes, recorded on one clock
 * (process.hrtime is CLOCK_MONOTONIC, shared by the machine's processes), never overlap.
 * Backends without FIFO run it too: there the paused waiter may not be the one granted (a
 * Redlock waiter must vote itself, which a paused process cannot; the masters' word goes to it
 * first and is lost), and the same checks hold: no overlap, and the next waiter granted in bound.
 */
export function lateGrantCases(context: FailureContext): void {
  describe('a waiter paused while queued, granted while paused, resumed after its lease ran out', () => {
    const services = new Services();
    const children: HolderProcess[] = [];
    let run: Scenario | undefined;
    let failure: unknown;

    // Run once; each case below reads its part, so a slow hand-on and an overlap fail apart.
    before(
      async () => {
        try {
          run = await scenario(context, services, children);
        } catch (error) {
          failure = error;
        }
      },
      { timeout: 45_000 },
    );

    after(async () => {
      await Promise.all(children.map((child) => child.stop()));
      await services.closeAll();
    });

    const ran = (t: TestContext): Scenario => {
      if (!run) throw failure;
      for (const [name, child] of [['paused waiter', run.paused], ['next waiter', run.next]] as const) {
        t.diagnostic(`${name}: ${child.events.filter((event) => event.type !== 'ready').map(show).join('; ')}`);
      }
      return run;
    };

    it('the paused waiter never runs its critical section as holder: holds never overlap, tokens increase in grant order', (t) => {
      const { paused, next, first, staleDone, freshDone } = ran(t);
      assertExclusive([first, ...sectionsOf(paused, 'paused waiter'), ...sectionsOf(next, 'next waiter')], { tokens: context.options.fencing !== false });
      if (context.options.fencing !== false) {
        const nextToken = BigInt(next.eventsOf('entered')[0].fencingToken);
        for (const entered of paused.eventsOf('entered')) {
          assert.ok(
            !entered.held || BigInt(entered.fencingToken) > nextToken,
            `the paused waiter entered as holder with the stale token ${entered.fencingToken} (the next holder has ${nextToken})`,
          );
        }
      }
      assert.equal(freshDone.error, undefined, `the next waiter's withLock failed: ${freshDone.error?.name}: ${freshDone.error?.message}`);
      // Told it lost (LockLostError), or refused before its section ever began (confirmed lost
      // with the server), or granted afresh after the next holder (the overlap check covers that).
      const staleEntered = paused.eventsOf('entered').some((entered) => entered.held);
      assert.ok(
        staleDone.error === undefined || staleDone.error.name === LockLostError.name || !staleEntered,
        `the paused waiter ran as holder and ended with ${staleDone.error?.name}: ${staleDone.error?.message}; expected LockLostError`,
      );
    });

    it(`the next waiter is granted within ttlMs + bound of the release (the paused one's lease runs out)`, (t) => {
      const { nextEnteredAfterMs } = ran(t);
      withinBound(t, 'next waiter granted after the release', nextEnteredAfterMs, HAND_ON_BOUND_MS);
    });
  });
}

interface Scenario {
  paused: HolderProcess;
  next: HolderProcess;
  /** The first holder's hold, in this process. */
  first: HoldInterval;
  nextEnteredAfterMs: number;
  staleDone: Extract<HolderEvent, { type: 'done' }>;
  freshDone: Extract<HolderEvent, { type: 'done' }>;
}

async function scenario(context: FailureContext, services: Services, children: HolderProcess[]): Promise<Scenario> {
  const { backend } = context.target().direct;
  const key = context.newKey();
  const [paused, next] = await Promise.all([HolderProcess.withModule({ backend, ttlMs: TTL_MS }), HolderProcess.withModule({ backend, ttlMs: TTL_MS })]);
  children.push(paused, next);
  const holder = await services.add({ backend, ttlMs: TTL_MS });

  const first = await holder.acquire(key);
  const firstStart = process.hrtime.bigint();
  const stale = paused.withLock(key, { holdMs: 300, waitTimeoutMs: 30_000 }, 50_000);
  await sleep(QUEUE_MS);
  paused.kill('SIGSTOP');
  const fresh = next.withLock(key, { holdMs: NEXT_HOLD_MS, waitTimeoutMs: 30_000 }, 50_000);
  await sleep(QUEUE_MS);
  const firstEnd = process.hrtime.bigint();
  const releasedAt = performance.now();
  await first.release();

  let nextEnteredAfterMs: number;
  try {
    await bounded(fresh.entered, HAND_ON_BOUND_MS + 10_000, 'the next waiter entering');
    nextEnteredAfterMs = performance.now() - releasedAt;
    await sleep(200);
  } finally {
    paused.kill('SIGCONT');
  }
  // The next holder's section ends NEXT_HOLD_MS after it began; a re-queued paused waiter follows it.
  const [staleDone, freshDone] = await bounded(Promise.all([stale.done, fresh.done]), NEXT_HOLD_MS + 5_000, 'both waiters ending');
  return {
    paused,
    next,
    first: { start: firstStart, end: firstEnd, fencingToken: first.fencingToken, holder: 'first holder (test process)' },
    nextEnteredAfterMs,
    staleDone,
    freshDone,
  };
}

function sectionsOf(child: HolderProcess, holder: string): HoldInterval[] {
  return child.eventsOf('section').map((section) => ({
    start: BigInt(section.start),
    end: BigInt(section.end),
    fencingToken: BigInt(section.fencingToken),
    holder,
  }));
}

function show(event: HolderEvent): string {
  switch (event.type) {
    case 'entered':
      return `entered with token ${event.fencingToken}, ${event.held ? 'held' : 'not held'}`;
    case 'section':
      return `ran as holder for ${(BigInt(event.end) - BigInt(event.start)) / 1_000_000n} ms`;
    case 'done':
      return event.error ? `ended with ${event.error.name} (${event.error.reason ?? describeError(event.error.message)})` : 'ended normally';
    default:
      return event.type;
  }
}
