/**
 * A separate process that holds one lock, for the fault tests (SIGKILL, SIGSTOP, restarts):
 * it runs its own Nest application context on the sample backend named in its environment and
 * obeys its parent over IPC. Started through holder-process.ts.
 */
import 'reflect-metadata';
import { NestFactory } from '@nestjs/core';
import { Module } from '@nestjs/common';
import { DistributedLockModule, LockService, type LockHandle } from '../../lib';
import { sampleBackend } from '../../sample-app/backends';
import type { StockRecord } from '../../sample-app/inventory/stock-store';
import type { HolderCommand, HolderEvent } from './holder-process';

async function main(): Promise<void> {
  const backend = sampleBackend(process.env.HOLDER_BACKEND!);
  const connection = JSON.parse(process.env.HOLDER_CONNECTION!);
  const ttlMs = Number(process.env.HOLDER_TTL_MS);
  @Module({ imports: [DistributedLockModule.forRoot({ backend: backend.lockBackend(connection), ttlMs })] })
  class HolderModule {}
  const app = await NestFactory.createApplicationContext(HolderModule, { logger: false });
  const store = await backend.stockStore(connection);
  const send = (event: HolderEvent) => process.send!(event);
  let lock: LockHandle | undefined;

  process.on('message', async (command: HolderCommand) => {
    try {
      switch (command.type) {
        case 'acquire':
          lock = await app.get(LockService).acquire(command.name, { waitTimeoutMs: command.waitTimeoutMs, renew: command.renew });
          lock.signal.addEventListener('abort', () => send({ type: 'lost', message: String(lock!.signal.reason?.message) }));
          return send({ type: 'acquired', fencingToken: lock.fencingToken.toString() });
        case 'write':
          await store.write(command.sku, command.record as StockRecord, lock!.fencingToken);
          return send({ type: 'written' });
        case 'release':
          await lock!.release();
          return send({ type: 'released' });
        case 'exit':
          await store.close();
          await app.close();
          process.exit(0);
      }
    } catch (error) {
      send({ type: 'error', name: (error as Error).name, message: (error as Error).message });
    }
  });
  // The test process is gone (it overran its time and was stopped): hold nothing for it.
  process.once('disconnect', () => process.exit(1));
  send({ type: 'ready' });
}

main().catch((error) => {
  console.error(error);
  process.exit(1);
});
