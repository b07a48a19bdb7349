import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { ConsoleLogger, Logger } from '@nestjs/common';
import { LockLostError, type LockHandle, type LockService } from '../../../lib';
import { CapturingLogger } from '../../support/capturing-logger';
import { sleep } from '../../support/timing';
import {
  MARGIN_MS,
  SERVER_TIMEOUT_MS,
  Services,
  TIMER_SLACK_MS,
  WAIT_TIMEOUT_MS,
  GRACE_MS,
  assertUnreachable,
  describeError,
  settled,
  timed,
  withinBound,
  type FailureContext,
  type Route,
  type Timed,
} from './failure-target';

const FAULTS = ['killed', 'paused', 'black-holed'] as const;
type Fault = (typeof FAULTS)[number];

/** The lease of the locks held when the fault strikes: renewed every third of it until then. */
const HELD_TTL_MS = 2_000;
/** A lost lock's release is handed to the background: the caller is not kept waiting for the server. */
const RELEASE_BOUND_MS = 300;

/** What a held lock's call saw, filled in as it happens (the call may hang). Times are performance.now(). */
interface Held {
  signalAt?: number;
  signalReason?: unknown;
  handlerEndedAt?: number;
  endedAt?: number;
  error?: unknown;
  /** Resolves when withLock has ended. */
  ended: Promise<void>;
}

/**
 * Contract points 1 and 2 for a server that is killed, paused (SIGSTOP) or black-holed: every call
 * ends by its deadline, and says that the server cannot be reached, naming it.
 */
export function serverFaultCases(context: FailureContext): void {
  for (const fault of FAULTS) {
    describe(`server ${fault}`, () => {
      const services = new Services();
      let route: Route;
      let acquirer: LockService;
      let trier: LockService;
      let faultAt = 0;
      let watching: Held;
      let ignoring: Held;
      /** A semaphore's permit held through the fault, watching its signal as `watching` does. */
      let permitWatching: Held | undefined;
      /**
       * A lock held by a service with the default serverTimeoutMs, above its lease: a paused or
       * cut-off server's renewal neither answers nor fails before the lease ends.
       */
      let patient: Held;
      let patientKey: string;
      const logger = new CapturingLogger();
      const modes = context.options.modes !== false;
      const noModes = modes ? undefined : 'the backend grants only the exclusive lock';
      let acquiring: Promise<Timed<LockHandle>>;
      /** A read lock and a semaphore's permit asked for as the fault strikes. */
      let otherModes: Promise<Timed<LockHandle>>[] = [];
      let trying: Promise<Timed<LockHandle | null>>;
      let inspecting: Promise<Timed<unknown>>;
      let forcing: Promise<Timed<unknown>>;
      let releasing: Promise<Timed<void>>;
      const acquireBound = Math.min(WAIT_TIMEOUT_MS, SERVER_TIMEOUT_MS) + MARGIN_MS;
      const tryBound = SERVER_TIMEOUT_MS + MARGIN_MS;

      before(async () => {
        const target = context.target();
        route = fault === 'black-holed' ? target.proxied! : target.direct;
        const settings = { backend: route.backend, serverTimeoutMs: SERVER_TIMEOUT_MS, ttlMs: HELD_TTL_MS };
        acquirer = await services.add(settings);
        trier = await services.add(settings);
        const holder = await services.add(settings);
        const patientHolder = await services.add({ backend: route.backend, ttlMs: HELD_TTL_MS });
        Logger.overrideLogger(logger);
        let inflicted!: () => void;
        const faultInflicted = new Promise<void>((resolve) => (inflicted = resolve));
        const [watchingEntered, ignoringEntered, permitEntered, patientEntered] = [deferred(), deferred(), deferred(), deferred()];
        patientKey = context.newKey();
        patient = holdThroughFault(patientHolder, patientKey, async (lock) => {
          patientEntered.resolve();
          await Promise.race([untilAborted(lock.signal), sleep(HELD_TTL_MS * 4)]);
        });
        if (!modes) permitEntered.resolve();
        else {
          permitWatching = holdThroughFault(holder, context.newKey(), async (lock) => {
            permitEntered.resolve();
            await Promise.race([untilAborted(lock.signal), sleep(HELD_TTL_MS * 4)]);
          }, 2);
        }
        // A handler that stops when its lock is lost (the documented pattern for long work)...
        watching = holdThroughFault(holder, context.newKey(), async (lock) => {
          watchingEntered.resolve();
          await Promise.race([untilAborted(lock.signal), sleep(HELD_TTL_MS * 4)]);
        });
        // ...and one that runs past the lease without looking.
        ignoring = holdThroughFault(holder, context.newKey(), async () => {
          ignoringEntered.resolve();
          await faultInflicted;
          await sleep(HELD_TTL_MS + 500);
        });
        const endedEarly = Promise.race([watching.ended, ignoring.ended]).then(() => {
          throw new Error(`a holder ended before the fault: ${describeError(watching.error ?? ignoring.error ?? 'no error')}`);
        });
        await Promise.race([Promise.all([watchingEntered.promise, ignoringEntered.promise, permitEntered.promise, patientEntered.promise]), endedEarly]);
        // Released as the fault strikes, with most of its lease left: the release waits for the
        // server (no early answer from the lease), so only the release's own bound can end it.
        const toRelease = await trier.acquire(context.newKey(), { waitTimeoutMs: WAIT_TIMEOUT_MS });
        faultAt = performance.now();
        await inflict(context, fault);
        inflicted();
        // Calls made as the fault strikes, each measured from its own start and awaited by its case.
        acquiring = timed(() => acquirer.acquire(context.newKey(), { waitTimeoutMs: WAIT_TIMEOUT_MS }), acquireBound + GRACE_MS);
        trying = timed(() => trier.tryAcquire(context.newKey()), tryBound + GRACE_MS);
        inspecting = timed(() => trier.inspect(context.newKey()), tryBound + GRACE_MS);
        forcing = timed(() => trier.forceRelease(context.newKey()), tryBound + GRACE_MS);
        releasing = timed(() => toRelease.release(), tryBound + GRACE_MS);
        if (modes) {
          otherModes = [
            timed(() => acquirer.acquire(context.newKey(), { mode: 'read', waitTimeoutMs: WAIT_TIMEOUT_MS }), acquireBound + GRACE_MS),
            timed(() => acquirer.acquireSemaphore(context.newKey(), 3, { waitTimeoutMs: WAIT_TIMEOUT_MS }), acquireBound + GRACE_MS),
          ];
        }
      });

      after(async () => {
        Logger.overrideLogger(new ConsoleLogger());
        await context.target().faults!.restore();
        await services.closeAll();
      });

      const CASE = { timeout: 12_000 };

      it('acquire rejects with LockServerUnreachableError naming the address within min(waitTimeoutMs, serverTimeoutMs) + margin', CASE, async (t) => {
        const outcome = await acquiring;
        t.diagnostic(`acquire ended with ${describeError(outcome.error ?? 'a lock')}`);
        withinBound(t, 'acquire', outcome.ms, acquireBound);
        assertUnreachable(outcome, route.address, 'acquire');
      });

      it('a read lock and a permit reject as acquire does', { ...CASE, skip: noModes }, async (t) => {
        for (const [what, call] of [['read lock', otherModes[0]], ['permit', otherModes[1]]] as const) {
          const outcome = await call;
          t.diagnostic(`${what} ended with ${describeError(outcome.error ?? 'a lock')}`);
          withinBound(t, what, outcome.ms, acquireBound);
          assertUnreachable(outcome, route.address, what);
        }
      });

      it("a held permit's signal fires before its lease ends, and withSemaphore ends with LockLostError 'server-unreachable'", { ...CASE, skip: noModes }, async (t) => {
        const bound = HELD_TTL_MS + MARGIN_MS;
        const held = permitWatching!;
        const ended = await settled(held.ended, faultAt, bound + GRACE_MS);
        t.diagnostic(`withSemaphore ${ended.error ? describeError(ended.error) : `ended with ${describeError(held.error ?? 'its result')}`}`);
        assert.ok(held.signalAt !== undefined, "the permit's signal never fired");
        withinBound(t, 'lost signal after the fault', held.signalAt - faultAt, HELD_TTL_MS + TIMER_SLACK_MS);
        withinBound(t, 'withSemaphore ended after the fault', (held.endedAt ?? performance.now()) - faultAt, bound);
        assertLostUnreachable(held.signalReason, 'the signal reason');
        assertLostUnreachable(held.error, 'withSemaphore');
      });

      it('tryAcquire rejects with LockServerUnreachableError naming the address within serverTimeoutMs + margin', CASE, async (t) => {
        const outcome = await trying;
        t.diagnostic(`tryAcquire ended with ${describeError(outcome.error ?? 'a lock or null')}`);
        withinBound(t, 'tryAcquire', outcome.ms, tryBound);
        assertUnreachable(outcome, route.address, 'tryAcquire');
      });

      it('inspect and forceRelease reject with LockServerUnreachableError naming the address within serverTimeoutMs + margin', CASE, async (t) => {
        for (const [what, call] of [['inspect', inspecting], ['forceRelease', forcing]] as const) {
          const outcome = await call;
          t.diagnostic(`${what} ended with ${describeError(outcome.error ?? 'an answer')}`);
          withinBound(t, what, outcome.ms, tryBound);
          assertUnreachable(outcome, route.address, what);
        }
      });

      it('releasing a lock still within its lease returns within serverTimeoutMs + margin, without throwing', CASE, async (t) => {
        const outcome = await releasing;
        t.diagnostic(`release ended with ${describeError(outcome.error ?? 'no error')}`);
        withinBound(t, 'release', outcome.ms, tryBound);
        assert.equal(outcome.error, undefined, `release threw ${describeError(outcome.error)}: a failed release is logged, the lease ends on its own`);
      });

      it("a held lock's signal fires before its lease ends, and withLock ends with LockLostError 'server-unreachable' by the lease deadline + margin", CASE, async (t) => {
        const bound = HELD_TTL_MS + MARGIN_MS;
        const ended = await settled(watching.ended, faultAt, bound + GRACE_MS);
        const held = watching;
        t.diagnostic(`withLock ${ended.error ? describeError(ended.error) : `ended with ${describeError(held.error ?? 'its result')}`}`);
        assert.ok(held.signalAt !== undefined, "the lock's signal never fired");
        // The last renewal the holder saw confirmed was requested before the fault: the lease ends by faultAt + ttl.
        withinBound(t, 'lost signal after the fault', held.signalAt - faultAt, HELD_TTL_MS + TIMER_SLACK_MS);
        withinBound(t, 'withLock ended after the fault', (held.endedAt ?? performance.now()) - faultAt, bound);
        assertLostUnreachable(held.signalReason, 'the signal reason');
        assertLostUnreachable(held.error, 'withLock');
      });

      it("with serverTimeoutMs above the lease (the default), the lock is lost as 'server-unreachable' too, after a warning", CASE, async (t) => {
        const ended = await settled(patient.ended, faultAt, HELD_TTL_MS + MARGIN_MS + GRACE_MS);
        t.diagnostic(`withLock ${ended.error ? describeError(ended.error) : `ended with ${describeError(patient.error ?? 'its result')}`}`);
        assert.ok(patient.signalAt !== undefined, "the lock's signal never fired");
        withinBound(t, 'lost signal after the fault', patient.signalAt - faultAt, HELD_TTL_MS + TIMER_SLACK_MS);
        assertLostUnreachable(patient.signalReason, 'the signal reason');
        assertLostUnreachable(patient.error, 'withLock');
        const warnings = logger.entries.filter((entry) => entry.level === 'warn' && entry.message.startsWith(`Renewing lock "${patientKey}"`));
        t.diagnostic(`renewal warnings: ${JSON.stringify(warnings.map(({ message, at }) => ({ message, afterFaultMs: Math.round(at - faultAt) })))}`);
        assert.equal(warnings.length, 1, 'expected one renewal warning');
        assert.ok(warnings[0].at < patient.signalAt, `the warning came ${Math.round(warnings[0].at - patient.signalAt)} ms after the loss`);
      });

      it("a handler that runs past its lease: withLock ends with LockLostError 'server-unreachable' as the handler returns", CASE, async (t) => {
        const ended = await settled(ignoring.ended, faultAt, HELD_TTL_MS + 500 + RELEASE_BOUND_MS + GRACE_MS);
        const held = ignoring;
        t.diagnostic(`withLock ${ended.error ? describeError(ended.error) : `ended with ${describeError(held.error ?? 'its result')}`}`);
        assert.ok(held.handlerEndedAt !== undefined, 'the handler did not run to its end');
        withinBound(t, 'withLock ended after its handler', (held.endedAt ?? performance.now()) - held.handlerEndedAt, RELEASE_BOUND_MS);
        assertLostUnreachable(held.error, 'withLock');
      });
    });
  }
}

async function inflict(context: FailureContext, fault: Fault): Promise<void> {
  const faults = context.target().faults!;
  if (fault === 'killed') await faults.kill();
  else if (fault === 'paused') faults.pause();
  else faults.blackHole();
}

/**
 * Runs withLock (withSemaphore with a `limit`), recording when the lock's signal fired, when the
 * handler returned and when the call ended.
 */
function holdThroughFault(service: LockService, key: string, handler: (lock: LockHandle) => Promise<void>, limit?: number): Held {
  const held = { ended: Promise.resolve() } as Held;
  held.ended = run(service, key, handler, held, limit);
  return held;
}

async function run(service: LockService, key: string, handler: (lock: LockHandle) => Promise<void>, outcome: Held, limit?: number): Promise<void> {
  const section = async (lock: LockHandle) => {
    lock.signal.addEventListener('abort', () => {
      outcome.signalAt = performance.now();
      outcome.signalReason = lock.signal.reason;
    });
    await handler(lock);
    outcome.handlerEndedAt = performance.now();
  };
  try {
    if (limit === undefined) await service.withLock(key, section, { waitTimeoutMs: WAIT_TIMEOUT_MS });
    else await service.withSemaphore(key, limit, section, { waitTimeoutMs: WAIT_TIMEOUT_MS });
  } catch (error) {
    outcome.error = error;
  }
  outcome.endedAt = performance.now();
}

function assertLostUnreachable(error: unknown, what: string): void {
  assert.ok(error instanceof LockLostError, `${what}: expected LockLostError, got ${describeError(error)}`);
  assert.equal(error.reason, 'server-unreachable', `${what}: reason ${error.reason}, not 'server-unreachable': ${error.message}`);
}

function untilAborted(signal: AbortSignal): Promise<void> {
  return new Promise((resolve) => {
    if (signal.aborted) return resolve();
    signal.addEventListener('abort', () => resolve(), { once: true });
  });
}

function deferred(): { promise: Promise<void>; resolve: () => void } {
  let resolve!: () => void;
  const promise = new Promise<void>((done) => (resolve = done));
  return { promise, resolve };
}
