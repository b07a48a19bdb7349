import type { FencingDemo } from './fencing-demo';
import type { WinnersCheck } from './winners-check';
import type { ScenarioResult } from '../scenarios/run-scenarios';

export interface SaleReport {
  backend: string;
  processes: number;
  lock: boolean;
  buyers: number;
  initialStock: number;
  stockLeft: number;
  /** The store's own count of sales. */
  lucky: number;
  /** Buyers who were told they got one. */
  winners: number;
  /** The store's list of winners against the buyers told they won. */
  winnersCheck: WinnersCheck;
  oversold: number;
  errors: Record<string, number>;
  makespanMs: number;
  criticalSectionsPerSecond: number;
  waitsMs: number[];
  fencing: FencingDemo;
  /** The store's other scenarios, each with its invariant checked. */
  scenarios: ScenarioResult[];
}

function percentile(values: number[], p: number): number {
  if (values.length === 0) return 0;
  const sorted = [...values].sort((a, b) => a - b);
  return sorted[Math.min(sorted.length - 1, Math.max(0, Math.ceil((p / 100) * sorted.length) - 1))];
}

export function printReport(report: SaleReport, json: boolean): void {
  const { waitsMs, ...rest } = report;
  const summary = {
    ...rest,
    waitP50Ms: round(percentile(waitsMs, 50)),
    waitP99Ms: round(percentile(waitsMs, 99)),
    makespanMs: round(report.makespanMs),
    criticalSectionsPerSecond: Math.round(report.criticalSectionsPerSecond),
    consistent: report.stockLeft + report.winners === report.initialStock && report.lucky === report.winners,
  };
  if (json) {
    console.log(JSON.stringify(summary));
    return;
  }
  const mode = report.lock ? 'with @WithLock' : 'WITHOUT the lock (--no-lock)';
  const rows: [string, string | number][] = [
    ['stock left', summary.stockLeft],
    ['winners', summary.winners],
    ['lucky counter', summary.lucky],
    ['recorded winners', describeWinners(report.winnersCheck, report.winners)],
    ['oversold', summary.oversold],
    ['consistent', summary.consistent ? 'yes (stock left + winners = initial stock)' : 'NO: updates were lost'],
    ['critical sections/s', summary.criticalSectionsPerSecond],
    ['wait p50 / p99', `${summary.waitP50Ms} ms / ${summary.waitP99Ms} ms`],
    ['makespan', `${summary.makespanMs} ms`],
  ];
  if (Object.keys(report.errors).length) rows.push(['failed buyers', JSON.stringify(report.errors)]);
  rows.push([
    'fencing',
    report.fencing.staleWriteRefused
      ? `a stale holder's write (token ${report.fencing.staleToken}) was refused after token ${report.fencing.acceptedToken} wrote` +
        (report.fencing.staleWinnerRecorded ? ', but its winner was recorded' : '; its winner was not recorded')
      : 'the stale write was NOT refused',
  ]);
  console.log(
    `Flash sale on ${report.backend}, ${mode}: ${report.buyers} buyers for ${report.initialStock} items, ` +
      `${report.processes} process${report.processes === 1 ? '' : 'es'}`,
  );
  for (const [label, value] of rows) console.log(`  ${label.padEnd(20)} ${value}`);
  for (const scenario of report.scenarios) console.log(`  ${scenario.name.padEnd(20)} ${scenario.detail}: ${scenario.ok ? 'ok' : 'INVARIANT BROKEN'}`);
  if (!report.lock && report.oversold > 0) {
    console.log(`\nWithout the lock, buyers read the same stock at once and ${report.oversold} more were told they won than there were items.`);
  }
}

function describeWinners(check: WinnersCheck, told: number): string {
  if (check.exact) return `${check.recorded}, exactly the buyers told they won`;
  return (
    `NO: ${check.recorded} recorded for ${told} told they won ` +
    `(${check.duplicates} duplicated, ${check.missing} missing, ${check.unexpected} never told they won)`
  );
}

const round = (ms: number) => Math.round(ms * 10) / 10;
