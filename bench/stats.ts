/** Order statistics for the benchmark: medians and percentiles, never single timings. */
export function percentile(values: readonly number[], p: number): number {
  if (values.length === 0) return Number.NaN;
  const sorted = [...values].sort((a, b) => a - b);
  const rank = Math.min(sorted.length - 1, Math.max(0, Math.ceil((p / 100) * sorted.length) - 1));
  return sorted[rank];
}

export const median = (values: readonly number[]) => percentile(values, 50);

export function formatRatio(ours: number, theirs: number): string {
  return `${(ours / theirs).toFixed(2)}x`;
}
