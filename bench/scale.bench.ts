import { Logger } from '@nestjs/common';
import { runInNewContext } from 'node:vm';
import { setFlagsFromString } from 'node:v8';
import type { BackendOptions, LockHandle, LockService } from '../lib';
import { createBackend } from '../lib/backends/registry';
import { forEachServer, type ServerCounter } from './bench-servers';
import { lockServiceOver } from './lock-services';
import { progress } from './progress';
import { median } from './stats';
import { recordFigure, recordTarget } from './summary';

const HELD = 10_000;
/** Acquired this many at a time: a burst the size of the contract's. */
const CHUNK = 1_000;
/** The module's default ttl: what a user holding many locks has unless they change it. */
const TTL_MS = 30_000;
/** LockLease renews at ttl/3 by default. */
const RENEW_INTERVAL_MS = TTL_MS / 3;
const WINDOW_MS = 2 * RENEW_INTERVAL_MS;
const CYCLES = 200;
/** Between the last grant and the window. */
const SETTLE_MS = 1_000;

/**
 * Issue 13's scale point: 10,000 locks of distinct names held at once by one process. Reports
 * memory per held lock, the requests the server receives per second while they are held (their
 * renewals, counted as the server counts requests), and the cycle time of an unrelated lock
 * while they are held against before.
 */
export async function run(): Promise<void> {
  // Renewal failures of 10,000 locks would be 10,000 warnings: the figures say it instead.
  Logger.overrideLogger(['error', 'fatal']);
  try {
    await measureAll();
  } finally {
    Logger.overrideLogger(['log', 'error', 'warn', 'debug', 'verbose', 'fatal']);
  }
}

async function measureAll(): Promise<void> {
  await forEachServer((server) => measure(server.name, server.backend, server.requests));
}

async function measure(name: string, backend: BackendOptions, requests: ServerCounter): Promise<void> {
  const { unit } = requests;
  const service = lockServiceOver(await createBackend(backend));
  const held: LockHandle[] = [];
  try {
    await (await service.acquire(`scale-warm-up-${process.pid}`)).release();
    // Once unmeasured: a cold first round (JIT, connections) would flatter the while-held figure.
    await unrelatedCycleMs(service);
    const cycleBefore = await unrelatedCycleMs(service);
    const heapBefore = heapUsed();
    for (let from = 0; from < HELD; from += CHUNK) {
      const chunk = Array.from({ length: CHUNK }, (_, i) => service.acquire(`scale-${process.pid}-${from + i}`, { ttlMs: TTL_MS, waitTimeoutMs: 60_000 }));
      held.push(...(await Promise.all(chunk)));
      progress(`${name}: locks held`, held.length, HELD);
    }
    const bytesPerLock = (heapUsed() - heapBefore) / HELD;
    // The window counts what holding costs: the last grants' own follow-up requests (ZooKeeper
    // sets each holder's node watch on the turn after its grant) are the acquisition's, not renewals.
    await new Promise((resolve) => setTimeout(resolve, SETTLE_MS));
    const before = await requests.read();
    const started = performance.now();
    await new Promise((resolve) => setTimeout(resolve, WINDOW_MS));
    const perSecond = ((await requests.read()) - before) / ((performance.now() - started) / 1000);
    const cycleWhileHeld = await unrelatedCycleMs(service);
    const lost = held.filter((handle) => !handle.isHeld).length;
    const perHundredPerInterval = (perSecond * (RENEW_INTERVAL_MS / 1000)) / (HELD / 100);
    console.log(
      `${name.padEnd(9)} ${HELD} locks held: ${Math.round(bytesPerLock)} bytes of heap per lock; ${Math.round(perSecond)} ${unit}/s at the server ` +
        `(${perHundredPerInterval.toFixed(2)} per 100 locks per renewal interval of ${RENEW_INTERVAL_MS} ms); an unrelated lock's cycle ` +
        `${cycleWhileHeld.toFixed(3)} ms while held, ${cycleBefore.toFixed(3)} ms before; ${lost} lost`,
    );
    recordFigure(`${name}, ${HELD} held: heap per lock`, `${Math.round(bytesPerLock)} B`);
    // Issue 13: renewals batched or shared, at most one request per 100 held locks per interval.
    recordTarget(`${name}, ${HELD} held: ${unit} per 100 locks per renewal interval`, perHundredPerInterval, '<=', 1, '');
    recordFigure(`${name}, ${HELD} held: unrelated cycle, while held / before`, `${(cycleWhileHeld / cycleBefore).toFixed(2)}x`);
  } catch (error) {
    // A backend that cannot hold this many is a result, not a reason to skip the others.
    console.log(`${name.padEnd(9)} ${HELD} locks held: FAILED after ${held.length} were taken: ${String(error)}`);
    recordFigure(`${name}, ${HELD} held`, `FAILED: ${(error as Error).name}`);
  } finally {
    await Promise.all(held.map((handle) => handle.release().catch(() => undefined)));
    await service.onApplicationShutdown();
  }
}

/** Median of 5 rounds of CYCLES acquire+release cycles of one name that nothing else uses. */
async function unrelatedCycleMs(service: LockService): Promise<number> {
  const rounds: number[] = [];
  for (let round = 0; round < 5; round++) {
    const started = performance.now();
    for (let i = 0; i < CYCLES; i++) await (await service.acquire(`scale-unrelated-${process.pid}`)).release();
    rounds.push((performance.now() - started) / CYCLES);
  }
  return median(rounds);
}

/** Heap in use after a full collection (the bench runs without --expose-gc, so it is turned on here). */
function heapUsed(): number {
  setFlagsFromString('--expose-gc');
  const gc = runInNewContext('gc') as () => void;
  gc();
  gc();
  return process.memoryUsage().heapUsed;
}
