import type { BackendOptions } from '../lib';
import { createBackend } from '../lib/backends/registry';
import { forEachServer, type ServerCounter } from './bench-servers';
import { lockServiceOver } from './lock-services';
import { recordFigure } from './summary';

const BURST = 1000;

/** What one burst cost the server, and what callers saw. */
interface BurstResult {
  errors: number;
  writes: number;
  makespanMs: number;
}

/**
 * Contract point 5: 1000 concurrent acquisitions in one process, of one name and of 1000 names,
 * each held for a moment. Counts the errors callers saw and the writes the server made: Redis
 * commands executed (scripts count once, and so do the commands they run), etcd raft proposals
 * committed, ZooKeeper transactions (zxid).
 */
export async function run(): Promise<void> {
  await forEachServer((server) => report(server.name, server.backend, server.writes));
}

async function report(name: string, backend: BackendOptions, writes: ServerCounter): Promise<void> {
  const { unit } = writes;
  const service = lockServiceOver(await createBackend(backend));
  try {
    // Warm up: connect, open the session, load the scripts.
    await service.withLock('warm-up', () => undefined);
    const oneName = await burst(() => writes.read(), (i) => service.withLock('burst', () => i));
    const manyNames = await burst(() => writes.read(), (i) => service.withLock(`burst-${i}`, () => i));
    for (const [label, result] of [['one name', oneName], ['1000 names', manyNames]] as const) {
      console.log(
        `${name.padEnd(9)} ${BURST} callers, ${label.padEnd(10)}: ${result.errors} errors, ${result.writes} ${unit} ` +
          `(${(result.writes / BURST).toFixed(2)} per caller), makespan ${Math.round(result.makespanMs)} ms`,
      );
      recordFigure(`${name}, ${BURST} callers, ${label}`, `${result.errors} errors, ${result.writes} ${unit}, ${Math.round(result.makespanMs)} ms`);
    }
  } finally {
    await service.onApplicationShutdown();
  }
}

async function burst(writes: () => Promise<number>, call: (i: number) => Promise<unknown>): Promise<BurstResult> {
  const before = await writes();
  const started = performance.now();
  const outcomes = await Promise.allSettled(Array.from({ length: BURST }, (_, i) => call(i)));
  const makespanMs = performance.now() - started;
  // Releases finish in the background of the last callers: let them land before counting.
  await new Promise((resolve) => setTimeout(resolve, 200));
  const errors = outcomes.filter((outcome) => outcome.status === 'rejected');
  if (errors.length > 0) console.log(`  first error: ${String((errors[0] as PromiseRejectedResult).reason)}`);
  return { errors: errors.length, writes: (await writes()) - before, makespanMs };
}
