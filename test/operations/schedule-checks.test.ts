import 'reflect-metadata';
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { ConsoleLogger, Injectable, Logger, Module } from '@nestjs/common';
import { NestFactory } from '@nestjs/core';
import { Cron, Interval, ScheduleModule } from '@nestjs/schedule';
import { DistributedLockModule, WithLock } from '../../lib';
import { CapturingLogger } from '../support/capturing-logger';

/** Jobs as a user writes them; only the ones whose period is not longer than minHoldMs are warned of. */
@Injectable()
class ReportJobs {
  @Cron('*/2 * * * * *')
  @WithLock('cron:every-2-s', { onTimeout: 'skip', waitTimeoutMs: 0, minHoldMs: 5_000 })
  async everyTwoSeconds(): Promise<void> {}

  @WithLock('cron:every-second', { onTimeout: 'skip', waitTimeoutMs: 0, minHoldMs: 1_000 })
  @Interval(1_000)
  async everySecond(): Promise<void> {}

  @Cron('0 * * * * *')
  @WithLock('cron:every-minute', { onTimeout: 'skip', waitTimeoutMs: 0, minHoldMs: 5_000 })
  async everyMinute(): Promise<void> {}

  @Interval(60_000)
  @WithLock('cron:no-hold', { onTimeout: 'skip', waitTimeoutMs: 0 })
  async noMinHold(): Promise<void> {}
}

describe('run-once jobs whose minHoldMs outlasts their period', () => {
  it('warn once at boot, naming the method, its period and minHoldMs; jobs with a longer period are not warned of', async () => {
    const logger = new CapturingLogger();
    @Module({ imports: [ScheduleModule.forRoot(), DistributedLockModule.forRoot()], providers: [ReportJobs] })
    class JobsApp {}
    const app = await NestFactory.createApplicationContext(JobsApp, { logger, abortOnError: false });
    try {
      const warnings = logger.entries.filter((entry) => entry.level === 'warn' && entry.context === 'DistributedLock').map((entry) => entry.message);
      assert.deepEqual(warnings, [
        "@Cron('*/2 * * * * *') on ReportJobs.everyTwoSeconds fires every 2000 ms, not longer than its minHoldMs (5000 ms): the lock is still kept at the next tick, so ticks are skipped. Set minHoldMs below 2000 ms (a little less than the period).",
        '@Interval(1000) on ReportJobs.everySecond fires every 1000 ms, not longer than its minHoldMs (1000 ms): the lock is still kept at the next tick, so ticks are skipped. Set minHoldMs below 1000 ms (a little less than the period).',
      ]);
    } finally {
      await app.close();
      Logger.overrideLogger(new ConsoleLogger());
    }
  });
});
