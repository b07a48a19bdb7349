/**
 * Where a long benchmark run is: section, workload and how far. Written to stderr, so the
 * results on stdout stay a clean record; on a terminal one line is rewritten in place, in a log
 * (CI) a line is written at each quarter so the log shows progress without flooding.
 */
let section = '';

export function enterSection(name: string, index: number, count: number): void {
  section = `${name} (section ${index + 1} of ${count})`;
}

export function progress(workload: string, done: number, total: number): void {
  const line = `  … ${section}: ${workload} ${done} of ${total}`;
  if (process.stderr.isTTY) {
    process.stderr.write(`\r${line}\x1b[K${done === total ? '\n' : ''}`);
    return;
  }
  const quarter = Math.max(1, Math.floor(total / 4));
  if (done === total || done % quarter === 0) process.stderr.write(`${line}\n`);
}
