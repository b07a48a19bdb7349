/**
 * The flash sale: `npm start -- [--backend B] [--processes N] [--buyers N] [--stock N] [--no-lock] [--json]`.
 * Seeds the stock, lets every buyer arrive at once (in this process, or spread over N buyer
 * processes, each its own Nest app), and prints what happened: with the lock nothing is ever
 * oversold; with --no-lock the same sale oversells.
 */
import 'reflect-metadata';
import { fork } from 'node:child_process';
import path from 'node:path';
import { LockService } from '../lib';
import { sampleBackend } from './backends';
import type { Connection } from './backends/sample-backend';
import { InventoryService, type StockView } from './inventory/inventory.service';
import { mergeResults, runBuyers, usersOf, type BuyerResults } from './flash-sale/buyers';
import { demonstrateFencing, type FencingDemo } from './flash-sale/fencing-demo';
import { startSaleApp } from './flash-sale/sale-app';
import { parseSaleFlags, type SaleFlags } from './flash-sale/sale-flags';
import type { WorkerMessage, WorkerTask } from './flash-sale/sale-protocol';
import { printReport, type SaleReport } from './flash-sale/sale-report';
import { checkWinners } from './flash-sale/winners-check';
import { runScenarios, type ScenarioResult } from './scenarios/run-scenarios';

async function main(): Promise<void> {
  const flags = parseSaleFlags(process.argv.slice(2));
  const backend = sampleBackend(flags.backend);
  if (flags.processes > 1 && !backend.multiProcess) {
    throw new Error(`--backend ${flags.backend} lives inside one process; use --backend redis, etcd or zookeeper with --processes.`);
  }
  const server = await backend.provision();
  try {
    const driver = await startSaleApp(backend, server.connection);
    try {
      await driver.store.seed(flags.sku, flags.stock);
      const { results, makespanMs } =
        flags.processes === 1
          ? await timed(() => runBuyers(driver.app.get(InventoryService), flags.sku, usersOf(0, 1, flags.buyers), flags.lock))
          : await runBuyerProcesses(flags, server.connection);
      const final = await driver.app.get(InventoryService).stockOf(flags.sku);
      const fencing: FencingDemo = await demonstrateFencing(driver.app.get(LockService), driver.store, flags.sku);
      const scenarios = await runScenarios(driver.app, flags.backend !== 'redlock');
      printReport(toReport(flags, results, final, makespanMs, fencing, scenarios), flags.json);
      if (scenarios.some((scenario) => !scenario.ok)) process.exitCode = 1;
    } finally {
      await driver.close();
    }
  } finally {
    await server.stop();
  }
}

interface TimedResults {
  results: BuyerResults;
  /** From the first buyer's start to the last buyer's answer (process start-up excluded). */
  makespanMs: number;
}

async function timed(sale: () => Promise<BuyerResults>): Promise<TimedResults> {
  const started = performance.now();
  const results = await sale();
  return { results, makespanMs: performance.now() - started };
}

/** Forks the buyer processes, starts them together once all are ready, and gathers their results. */
async function runBuyerProcesses(flags: SaleFlags, connection: Connection): Promise<TimedResults> {
  const workers = Array.from({ length: flags.processes }, (_, index) => {
    const task: WorkerTask = {
      backend: flags.backend,
      connection,
      sku: flags.sku,
      users: usersOf(index, flags.processes, flags.buyers),
      lock: flags.lock,
    };
    return fork(path.join(__dirname, 'flash-sale', 'sale-worker.js'), [], {
      env: { ...process.env, SALE_WORKER_TASK: JSON.stringify(task) },
      stdio: ['ignore', 'inherit', 'inherit', 'ipc'],
    });
  });
  const next = (worker: (typeof workers)[number], type: WorkerMessage['type']) =>
    new Promise<WorkerMessage>((resolve, reject) => {
      worker.on('message', (message: WorkerMessage) => message.type === type && resolve(message));
      worker.once('exit', (code) => reject(new Error(`buyer process ${worker.pid} exited (code ${code}) before "${type}"`)));
    });
  try {
    await Promise.all(workers.map((worker) => next(worker, 'ready')));
    const done = workers.map((worker) => next(worker, 'done'));
    return await timed(async () => {
      for (const worker of workers) worker.send('go');
      const messages = await Promise.all(done);
      return mergeResults(messages.map((message) => (message as Extract<WorkerMessage, { type: 'done' }>).results));
    });
  } finally {
    for (const worker of workers) if (worker.exitCode === null) worker.kill();
  }
}

function toReport(
  flags: SaleFlags,
  results: BuyerResults,
  final: StockView,
  makespanMs: number,
  fencing: FencingDemo,
  scenarios: ScenarioResult[],
): SaleReport {
  return {
    backend: flags.backend,
    processes: flags.processes,
    lock: flags.lock,
    buyers: flags.buyers,
    initialStock: flags.stock,
    stockLeft: final.stock,
    lucky: final.lucky,
    winners: results.winners.length,
    winnersCheck: checkWinners(results.winners, final.winners),
    oversold: Math.max(0, results.winners.length - flags.stock),
    errors: results.errors,
    makespanMs,
    criticalSectionsPerSecond: (results.winners.length + results.losers) / (makespanMs / 1000),
    waitsMs: results.waitsMs,
    fencing,
    scenarios,
  };
}

main().catch((error) => {
  console.error(error instanceof Error ? error.message : error);
  process.exit(1);
});
