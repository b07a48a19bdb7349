/**
 * The run's headline figures, gathered from every section and printed as one table at the end,
 * so a long run ends with what to read (and to copy into BENCHMARKS.md).
 */
interface Row {
  section: string;
  measure: string;
  value: string;
  target: string;
  verdict: string;
}

const rows: Row[] = [];
let section = '';

export function summarySection(name: string): void {
  section = name;
}

/** A figure without a target (e.g. a makespan shown for reference). */
export function recordFigure(measure: string, value: string): void {
  rows.push({ section, measure, value, target: '', verdict: '' });
}

/**
 * A ratio with its target: prints the target line where the section's output stands, and keeps
 * it for the table. `bound` is the largest acceptable value (`<=`) or the smallest (`>=`).
 * `unit` '' for a count that is not a ratio (requests per 100 locks).
 */
export function recordTarget(measure: string, ratio: number, comparison: '<=' | '>=', bound: number, unit: 'x' | '' = 'x'): void {
  const met = comparison === '<=' ? ratio <= bound : ratio >= bound;
  const value = `${ratio.toFixed(ratio < 0.1 ? 3 : 2)}${unit}`;
  const target = `${comparison} ${bound}${unit}`;
  console.log(`target ${measure} ${target}: ${value} ${met ? 'MET' : 'MISSED'}`);
  rows.push({ section, measure, value, target, verdict: met ? 'met' : 'MISSED' });
}

export function printSummary(): void {
  if (rows.length === 0) return;
  const header: Row = { section: 'section', measure: 'measure', value: 'value', target: 'target', verdict: 'verdict' };
  const columns = Object.keys(header) as (keyof Row)[];
  const widths = columns.map((key) => Math.max(...[header, ...rows].map((row) => row[key].length)));
  const line = (row: Row) => `| ${columns.map((key, i) => row[key].padEnd(widths[i])).join(' | ')} |`;
  console.log('\n== summary ==');
  console.log(line(header));
  console.log(`|${widths.map((width) => '-'.repeat(width + 2)).join('|')}|`);
  for (const row of rows) console.log(line(row));
}
