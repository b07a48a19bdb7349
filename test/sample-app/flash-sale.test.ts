import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import path from 'node:path';
import { describe, it } from 'node:test';
import { promisify } from 'node:util';

const run = promisify(execFile);
const driver = path.resolve(__dirname, '../../sample-app/flash-sale.js');

/** Runs the flash-sale driver as `npm start` does and returns its --json line. */
export async function flashSale(...flags: string[]): Promise<Record<string, any>> {
  const { stdout } = await run(process.execPath, [driver, '--json', ...flags], { timeout: 120_000 });
  return JSON.parse(stdout.trim().split('\n').pop()!);
}

describe('flash sale on the embedded backend', () => {
  it('sells exactly the stock to 1000 buyers: never oversold, winners recorded exactly, fenced stale write refused', async () => {
    const sale = await flashSale();
    assert.equal(sale.backend, 'memory');
    assert.equal(sale.buyers, 1000);
    assert.equal(sale.initialStock, 300);
    assert.equal(sale.oversold, 0);
    assert.equal(sale.winners, 300);
    assert.equal(sale.lucky, 300);
    assert.equal(sale.stockLeft, 0);
    assert.deepEqual(sale.winnersCheck, { recorded: 300, duplicates: 0, missing: 0, unexpected: 0, exact: true });
    assert.deepEqual(sale.errors, {});
    assert.equal(sale.fencing.staleWriteRefused, true);
    assert.equal(sale.fencing.staleWinnerRecorded, false);
    assert.ok(BigInt(sale.fencing.staleToken) < BigInt(sale.fencing.acceptedToken));
    for (const field of ['waitP50Ms', 'waitP99Ms', 'criticalSectionsPerSecond']) {
      assert.ok(Number.isFinite(sale[field]) && sale[field] > 0, `${field} is ${sale[field]}`);
    }
    assert.ok(sale.waitP50Ms <= sale.waitP99Ms, `wait p50 ${sale.waitP50Ms} ms > p99 ${sale.waitP99Ms} ms`);
  });

  it('takes --buyers and --stock, and sells all when buyers are fewer than items', async () => {
    const sale = await flashSale('--buyers', '40', '--stock', '55');
    assert.equal(sale.winners, 40);
    assert.equal(sale.stockLeft, 15);
    assert.equal(sale.lucky, 40);
    assert.equal(sale.winnersCheck.exact, true);
  });

  it('oversells without the lock (--no-lock), which is why the lock exists', async () => {
    const sale = await flashSale('--no-lock');
    assert.equal(sale.lock, false);
    assert.ok(sale.oversold > 0, 'the unlocked sale did not oversell');
    assert.equal(sale.consistent, false);
  });

  it('refuses --processes on the in-process backend, and unknown flags, with a clear message', async () => {
    await assert.rejects(run(process.execPath, [driver, '--processes', '2']), /lives inside one process/);
    await assert.rejects(run(process.execPath, [driver, '--buyers', 'many']), /--buyers must be a whole number/);
    await assert.rejects(run(process.execPath, [driver, '--backend', 'nope']), /Unknown --backend "nope"/);
  });
});
