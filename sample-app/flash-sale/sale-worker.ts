/** A buyer process of a multi-process flash sale: forked by flash-sale.ts, driven over IPC. */
import 'reflect-metadata';
import { sampleBackend } from '../backends';
import { InventoryService } from '../inventory/inventory.service';
import { runBuyers } from './buyers';
import { startSaleApp } from './sale-app';
import type { WorkerTask, WorkerMessage } from './sale-protocol';

async function main(): Promise<void> {
  const task: WorkerTask = JSON.parse(process.env.SALE_WORKER_TASK!);
  const sale = await startSaleApp(sampleBackend(task.backend), task.connection);
  const send = (message: WorkerMessage) => process.send!(message);
  process.once('message', async () => {
    const results = await runBuyers(sale.app.get(InventoryService), task.sku, task.users, task.lock);
    send({ type: 'done', results });
    await sale.close();
    process.disconnect();
  });
  send({ type: 'ready' });
}

main().catch((error) => {
  console.error(error);
  process.exit(1);
});
