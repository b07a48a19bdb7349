/**
 * A separate process that holds locks, for the fault tests (SIGKILL, SIGSTOP, restarts): it runs
 * its own Nest application context, on the sample backend named in its environment or on the
 * module options given as JSON, and obeys its parent over IPC. Started through holder-process.ts.
 */
import 'reflect-metadata';
import { NestFactory } from '@nestjs/core';
import { Module } from '@nestjs/common';
import { DistributedLockModule, LockLostError, LockService, type DistributedLockModuleOptions, type LockHandle } from '../../lib';
import { sampleBackend } from '../../sample-app/backends';
import type { StockRecord, StockStore } from '../../sample-app/inventory/stock-store';
import type { HolderCommand, HolderEvent } from './holder-process';

const now = () => process.hrtime.bigint();

async function main(): Promise<void> {
  const { options, store } = await setUp();
  @Module({ imports: [DistributedLockModule.forRoot(options)] })
  class HolderModule {}
  const app = await NestFactory.createApplicationContext(HolderModule, { logger: false });
  const locks = app.get(LockService);
  const send = (event: HolderEvent) => process.send!(event);
  let lock: LockHandle | undefined;
  // Connected (and its session open) before the parent is told it is ready: a test that queues
  // this process behind another must not wait on its connection.
  const warmUp = await locks.tryAcquire(`holder-warm-up-${process.pid}`);
  await warmUp?.release();

  process.on('message', async (command: HolderCommand) => {
    try {
      switch (command.type) {
        case 'acquire':
          lock =
            command.limit === undefined
              ? await locks.acquire(command.name, { waitTimeoutMs: command.waitTimeoutMs, renew: command.renew, mode: command.mode })
              : await locks.acquireSemaphore(command.name, command.limit, { waitTimeoutMs: command.waitTimeoutMs, renew: command.renew });
          lock.signal.addEventListener('abort', () => send({ type: 'lost', message: String(lock!.signal.reason?.message), at: now().toString() }));
          return send({ type: 'acquired', fencingToken: lock.fencingToken.toString(), grantedAt: now().toString() });
        case 'withLock':
          return send(await criticalSection(locks, command, send));
        case 'write':
          if (!store) throw new Error('this holder was started without a stock store');
          await store.write(command.sku, command.record as StockRecord, lock!.fencingToken);
          return send({ type: 'written' });
        case 'release':
          await lock!.release();
          return send({ type: 'released' });
        case 'exit':
          await store?.close();
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

async function setUp(): Promise<{ options: DistributedLockModuleOptions; store?: StockStore }> {
  if (process.env.HOLDER_MODULE_OPTIONS) return { options: JSON.parse(process.env.HOLDER_MODULE_OPTIONS) };
  const backend = sampleBackend(process.env.HOLDER_BACKEND!);
  const connection = JSON.parse(process.env.HOLDER_CONNECTION!);
  const options = { backend: backend.lockBackend(connection), ttlMs: Number(process.env.HOLDER_TTL_MS) };
  return { options, store: await backend.stockStore(connection) };
}

/**
 * withLock with a critical section of `holdMs` that stops early when its lock is lost, and runs
 * not at all when the lock is not held as it begins. Reports when it ran as holder.
 */
async function criticalSection(
  locks: LockService,
  command: Extract<HolderCommand, { type: 'withLock' }>,
  send: (event: HolderEvent) => void,
): Promise<HolderEvent> {
  try {
    await locks.withLock(
      command.name,
      async (lock) => {
        const start = now();
        const held = lock.isHeld;
        send({ type: 'entered', fencingToken: lock.fencingToken.toString(), at: start.toString(), held });
        if (!held) return;
        let lostAt: bigint | undefined;
        await new Promise<void>((resolve) => {
          const timer = setTimeout(resolve, command.holdMs);
          lock.signal.addEventListener('abort', () => {
            lostAt = now();
            clearTimeout(timer);
            resolve();
          });
        });
        send({ type: 'section', fencingToken: lock.fencingToken.toString(), start: start.toString(), end: (lostAt ?? now()).toString(), cutShort: lostAt !== undefined });
      },
      { waitTimeoutMs: command.waitTimeoutMs },
    );
    return { type: 'done' };
  } catch (error) {
    const reason = error instanceof LockLostError ? error.reason : undefined;
    return { type: 'done', error: { name: (error as Error).name, message: (error as Error).message, reason } };
  }
}

main().catch((error) => {
  console.error(error);
  process.exit(1);
});
