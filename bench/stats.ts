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

/** Microseconds with their sign: `+6.5`, `-1.0`. */
export function signedUs(us: number): string {
  return `${us >= 0 ? '+' : ''}${us.toFixed(1)}`;
}

/**
 * Ratios taken inside each round (both sides measured back to back, under the same machine
 * load), then their median and quartiles: on a shared machine whose speed drifts over seconds,
 * this is steadier than the ratio of two medians taken over the whole run.
 */
export function pairedRatio(ours: readonly number[], theirs: readonly number[]): { median: number; p25: number; p75: number } {
  const ratios = ours.map((value, round) => value / theirs[round]);
  return { median: median(ratios), p25: percentile(ratios, 25), p75: percentile(ratios, 75) };
}

/** From cycles/s per round: how many times `theirs`' cycle time `ours` takes, round by round (pairedRatio's median, inverted). */
export function pairedTimeRatio(ours: readonly number[], theirs: readonly number[]): number {
  return 1 / pairedRatio(ours, theirs).median;
}
