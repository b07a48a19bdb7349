import { progress } from './progress';
import { median, percentile } from './stats';

/** The contended flash sale every backend's section runs: 4 connections x 50 buyers race for a stock of 150 on one name. */
export const SALE_CONNECTIONS = 4;
export const SALE_BUYERS_PER_CONNECTION = 50;
export const SALE_STOCK = 150;

/**
 * Runs one lock's critical section. Each library under test is adapted to this shape, so every
 * library runs the same workload: `criticalSection` must be called while holding `lockName`.
 */
export type LockRunner = (lockName: string, criticalSection: () => void | Promise<void>) => Promise<void>;

export interface CycleResult {
  /** Median over rounds of acquire+release cycles per second. */
  cyclesPerSecond: number;
  /** Median time of one cycle, in ms. */
  cycleMs: number;
}

/** How long `cycles` uncontended acquire+release cycles on `name`, one after another, take (ms). */
export async function cyclesMs(run: LockRunner, name: string, cycles: number): Promise<number> {
  const started = performance.now();
  for (let i = 0; i < cycles; i++) await run(name, () => undefined);
  return performance.now() - started;
}

/** Uncontended acquire+release cycles, one after another, on a fresh name each round. */
export async function uncontendedCycles(run: LockRunner, rounds = 7, cyclesPerRound = 300): Promise<CycleResult> {
  const perSecond: number[] = [];
  for (let round = 0; round < rounds; round++) {
    const name = `bench-cycle-${process.pid}-${Date.now()}-${round}`;
    perSecond.push(cyclesPerRound / ((await cyclesMs(run, name, cyclesPerRound)) / 1000));
    if (rounds > 1) progress('uncontended round', round + 1, rounds);
  }
  const cyclesPerSecond = median(perSecond);
  return { cyclesPerSecond, cycleMs: 1000 / cyclesPerSecond };
}

/**
 * Cycles each library runs before any is measured. V8 optimizes a call path only after it has
 * run many times, and a deeper path takes longer: this library's Redlock cycle was still 1.8x its
 * steady time after 200 cycles and reached it after about 3,000, while the peers' shallower paths
 * were steady after a few hundred. A long-running service only ever sees the steady state.
 */
export const WARMUP_CYCLES = 3000;

/**
 * Uncontended cycles of several libraries, in rounds: each round runs every library once, in a
 * shuffled order (no library always runs right after the same one), after `warmupCycles` of each.
 * Returns cycles per second per library, one entry per round, aligned by round.
 */
export async function interleavedCycles<K>(runners: ReadonlyMap<K, LockRunner>, rounds: number, cyclesPerRound: number, warmupCycles = WARMUP_CYCLES): Promise<Map<K, number[]>> {
  const results = new Map<K, number[]>([...runners.keys()].map((key) => [key, []]));
  for (const run of runners.values()) await uncontendedCycles(run, 1, warmupCycles);
  for (let round = 0; round < rounds; round++) {
    const order = [...runners.keys()].sort(() => Math.random() - 0.5);
    for (const key of order) results.get(key)!.push((await uncontendedCycles(runners.get(key)!, 1, cyclesPerRound)).cyclesPerSecond);
    progress('uncontended round', round + 1, rounds);
  }
  return results;
}

export interface FlashSaleResult {
  makespanMs: number;
  criticalSectionsPerSecond: number;
  waitP50Ms: number;
  waitP99Ms: number;
  stockLeft: number;
  winners: number;
  initialStock: number;
  /** stock + winners == initial and winners <= initial. */
  invariantHolds: boolean;
}

/**
 * The flash sale: every buyer of every connection arrives at once on one lock name and buys
 * once; the stock is read, yielded on, and written back, so only the lock keeps it right.
 */
export async function flashSale(runners: LockRunner[], buyersPerConnection: number, initialStock: number): Promise<FlashSaleResult> {
  const name = `bench-sale-${process.pid}-${Date.now()}`;
  let stock = initialStock;
  let winners = 0;
  const waits: number[] = [];
  const started = performance.now();
  await Promise.all(
    runners.flatMap((run) =>
      Array.from({ length: buyersPerConnection }, async () => {
        const arrived = performance.now();
        await run(name, async () => {
          waits.push(performance.now() - arrived);
          const seen = stock;
          await Promise.resolve();
          if (seen > 0) {
            stock = seen - 1;
            winners++;
          }
        });
      }),
    ),
  );
  const makespanMs = performance.now() - started;
  return {
    makespanMs,
    criticalSectionsPerSecond: (runners.length * buyersPerConnection) / (makespanMs / 1000),
    waitP50Ms: percentile(waits, 50),
    waitP99Ms: percentile(waits, 99),
    stockLeft: stock,
    winners,
    initialStock,
    invariantHolds: stock + winners === initialStock && winners <= initialStock && stock >= 0,
  };
}

/** Repeats a flash sale and keeps the run with the median makespan (the machine is noisy). */
export async function medianFlashSale(repeat: number, sale: () => Promise<FlashSaleResult>): Promise<FlashSaleResult & { runs: number }> {
  const results: FlashSaleResult[] = [];
  for (let i = 0; i < repeat; i++) {
    results.push(await sale());
    progress('flash sale', i + 1, repeat);
  }
  results.sort((a, b) => a.makespanMs - b.makespanMs);
  const middle = results[Math.floor(results.length / 2)];
  return { ...middle, invariantHolds: results.every((r) => r.invariantHolds), runs: results.length };
}
