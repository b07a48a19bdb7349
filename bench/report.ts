import type { FlashSaleResult } from './workloads';

/** One line per library, so ratios can be read down a column. */
export function printFlashSale(label: string, result: FlashSaleResult & { runs?: number }): void {
  const round = (n: number) => Math.round(n * 10) / 10;
  console.log(
    `flash sale ${label}: makespan ${round(result.makespanMs)} ms, ${Math.round(result.criticalSectionsPerSecond)} cs/s, ` +
      `wait p50 ${round(result.waitP50Ms)} ms p99 ${round(result.waitP99Ms)} ms, ` +
      `stock ${result.stockLeft} + winners ${result.winners} = ${result.stockLeft + result.winners} of ${result.initialStock}` +
      (result.invariantHolds ? '' : '  INVARIANT BROKEN') +
      (result.runs ? ` (median of ${result.runs})` : ''),
  );
}
