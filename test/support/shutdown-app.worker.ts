/**
 * An HTTP application as a user runs it (`enableShutdownHooks()`, Nest's own logger), for the
 * shutdown case of the failure contract: GET /work holds the lock named in its environment for a
 * while, and a background job (a queue consumer, say) holds another lock until that lock's signal
 * tells it to stop. It prints `[probe] ...` lines on stdout (synchronous on a pipe, so none is
 * lost when the process ends on its signal): when it listens, when each holder starts, and each
 * release that reaches the backend.
 */
import 'reflect-metadata';
import { setTimeout as sleep } from 'node:timers/promises';
import { Controller, Get, Injectable, Module } from '@nestjs/common';
import { NestFactory } from '@nestjs/core';
import { DistributedLockModule, LockService, WithLock, currentLock, type LockBackend } from '../../lib';
import { LOCK_BACKEND } from '../../lib/backends/lock-backend.token';

const lockName = process.env.SHUTDOWN_APP_LOCK!;
const jobLockName = process.env.SHUTDOWN_APP_JOB_LOCK!;
const jobTtlMs = Number(process.env.SHUTDOWN_APP_JOB_TTL_MS);
const holdMs = Number(process.env.SHUTDOWN_APP_HOLD_MS);
const probe = (line: string) => process.stdout.write(`[probe] ${line}\n`);

@Injectable()
class Work {
  @WithLock(lockName)
  async run(): Promise<{ fencingToken: string }> {
    probe('entered');
    await sleep(holdMs);
    return { fencingToken: currentLock()!.fencingToken.toString() };
  }
}

@Controller()
class WorkController {
  constructor(private readonly work: Work) {}

  @Get('work')
  run(): Promise<{ fencingToken: string }> {
    return this.work.run();
  }
}

@Module({
  imports: [DistributedLockModule.forRoot(JSON.parse(process.env.SHUTDOWN_APP_MODULE_OPTIONS!))],
  controllers: [WorkController],
  providers: [Work],
})
class ShutdownAppModule {}

async function main(): Promise<void> {
  const app = await NestFactory.create(ShutdownAppModule);
  app.enableShutdownHooks();
  const backend = app.get<LockBackend>(LOCK_BACKEND, { strict: false });
  const release = backend.release.bind(backend);
  backend.release = (grant, validForMs) => {
    probe(`release ${grant.key}`);
    return release(grant, validForMs);
  };
  // The job stops when its lock's signal fires (at shutdown, once its lease ends), as long-running work should.
  void app
    .get(LockService)
    .withLock(
      jobLockName,
      (lock) => {
        probe('job entered');
        return new Promise<void>((resolve) => lock.signal.addEventListener('abort', () => resolve(), { once: true }));
      },
      { ttlMs: jobTtlMs },
    )
    .then(
      () => probe('job ended'),
      (error) => probe(`job ended with ${error.name} ${error.reason ?? ''}`.trim()),
    );
  await app.listen(0, '127.0.0.1');
  probe(`listening ${(app.getHttpServer().address() as { port: number }).port}`);
}

main().catch((error) => {
  console.error(error);
  process.exit(1);
});
