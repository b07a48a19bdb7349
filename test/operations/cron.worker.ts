/**
 * One replica of a Nest app whose `@Cron` job runs every second under
 * `@WithLock(..., { onTimeout: 'skip', waitTimeoutMs: 0, minHoldMs })` on a shared Redis.
 * `CRON_LATE_MS` makes this replica's clock fire that much later (as a replica whose clock is
 * behind). Reports each run, each skip and every warn/error log line to the parent.
 */
import 'reflect-metadata';
import { Injectable, Module, type LoggerService } from '@nestjs/common';
import { NestFactory } from '@nestjs/core';
import { Cron, ScheduleModule } from '@nestjs/schedule';
import { DistributedLockModule, WithLock } from '../../lib';

const lateMs = Number(process.env.CRON_LATE_MS ?? 0);
const send = (event: object) => process.send!(event);

/** The replica's clock is `ms` late: the job starts that long after the tick. */
function LateBy(ms: number): MethodDecorator {
  return (_target, _key, descriptor: PropertyDescriptor) => {
    const job = descriptor.value as (...args: unknown[]) => Promise<unknown>;
    descriptor.value = async function (this: unknown, ...args: unknown[]) {
      await new Promise((resolve) => setTimeout(resolve, ms));
      return job.apply(this, args);
    };
    return descriptor;
  };
}

@Injectable()
class ReportJob {
  @Cron('* * * * * *', { name: 'report' })
  @LateBy(lateMs)
  @WithLock('cron:report', { onTimeout: 'skip', waitTimeoutMs: 0, minHoldMs: 500 })
  async run(): Promise<void> {
    send({ type: 'ran', tick: Math.floor(Date.now() / 1000), pid: process.pid });
    await new Promise((resolve) => setTimeout(resolve, 10)); // a 10 ms job
  }
}

const logger: LoggerService = {
  log: () => undefined,
  verbose: () => undefined,
  debug: (message) => String(message).includes('skipped') && send({ type: 'skipped' }),
  warn: (message) => send({ type: 'log', level: 'warn', message: String(message) }),
  error: (message, ...rest) => send({ type: 'log', level: 'error', message: `${String(message)} ${rest.map(String).join(' ')}` }),
  fatal: (message) => send({ type: 'log', level: 'fatal', message: String(message) }),
};

// doctor: 'off': the test Redis runs without persistence on purpose, and every warn line here fails the test (the doctor has its own, test/doctor).
@Module({
  imports: [ScheduleModule.forRoot(), DistributedLockModule.forRoot({ backend: { type: 'redis', url: process.env.REDIS_URL! }, doctor: 'off' })],
  providers: [ReportJob],
})
class CronAppModule {}

async function main(): Promise<void> {
  const app = await NestFactory.createApplicationContext(CronAppModule, { logger });
  await app.init();
  send({ type: 'ready' });
  process.on('message', (command: { type: string }) => {
    if (command.type === 'exit') void app.close().then(() => process.exit(0));
  });
}

main().catch((error) => {
  send({ type: 'log', level: 'error', message: String(error?.stack ?? error) });
  process.exit(1);
});
