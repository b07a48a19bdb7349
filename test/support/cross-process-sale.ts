import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import path from 'node:path';
import { promisify } from 'node:util';

const run = promisify(execFile);
const driver = path.resolve(__dirname, '../../sample-app/flash-sale.js');

/** The report the sample app's driver prints with `--json` (sample-app/flash-sale/sale-report.ts). */
export type SaleReport = Record<string, any>;

/**
 * The sample app's flash sale as `npm start` runs it, across 4 buyer processes (each its own Nest
 * app), on the test's own server: `env` names it (REDIS_URL, ETCD_HOSTS, ZOOKEEPER_CONNECT).
 */
export async function runCrossProcessSale(backend: string, env: Record<string, string>, ...flags: string[]): Promise<SaleReport> {
  const { stdout } = await run(process.execPath, [driver, '--json', '--backend', backend, '--processes', '4', ...flags], {
    timeout: 120_000,
    env: { ...process.env, ...env },
  });
  return JSON.parse(stdout.trim().split('\n').pop()!);
}

/** Never oversold, winners exact (counted and recorded), the store's own counter agrees, and the stale token refused. */
export function assertSoldExactly(sale: SaleReport, backend: string): void {
  assert.equal(sale.backend, backend);
  assert.equal(sale.processes, 4);
  assert.equal(sale.oversold, 0);
  assert.equal(sale.winners, Math.min(sale.buyers, sale.initialStock));
  assert.equal(sale.stockLeft + sale.winners, sale.initialStock);
  assert.equal(sale.lucky, sale.winners);
  assert.deepEqual(sale.errors, {});
  assert.equal(sale.fencing.staleWriteRefused, true);
  assert.equal(sale.fencing.staleWinnerRecorded, false);
  // The store's own list of winners is exactly the buyers who were told they won.
  assert.equal(sale.winnersCheck.exact, true, JSON.stringify(sale.winnersCheck));
}

/** The same sale without the lock must go wrong, or the sale with it proves nothing. */
export function assertWentWrong(sale: SaleReport): void {
  assert.ok(sale.oversold > 0 || sale.lucky !== sale.winners || sale.stockLeft + sale.winners !== sale.initialStock, JSON.stringify(sale));
}
