import { Injectable, Module } from '@nestjs/common';
import { NestFactory } from '@nestjs/core';
import { DistributedLockModule, LockService, WithLock } from '../lib';
import { recordTarget } from './summary';
import { pairedRatio } from './stats';
import { interleavedCycles, type LockRunner } from './workloads';

// A memory cycle takes only a few microseconds, so a garbage collection or a timer that falls in
// one round moves that round's ratio by 10% and more: many rounds, so that their median holds still.
const ROUNDS = 121;
const CYCLES_PER_ROUND = 3_000;

@Injectable()
class DecoratedJob {
  /** The lock name comes from the argument, as in the sample app's `stock:<0>`. */
  @WithLock('bench-decorator:<0>')
  async run(_name: string, section: () => void | Promise<void>): Promise<void> {
    await section();
  }

  /** The same method undecorated, for the direct call: only the decorator differs. */
  async plain(_name: string, section: () => void | Promise<void>): Promise<void> {
    await section();
  }
}

@Module({ imports: [DistributedLockModule.forRoot()], providers: [DecoratedJob] })
class DecoratorBenchModule {}

/**
 * What `@WithLock` costs over calling `LockService.withLock` directly, on the memory backend (no
 * network, so the decorator's own work is all the difference): name resolution from the
 * arguments, finding the application's service, and the option checks.
 */
export async function run(): Promise<void> {
  const app = await NestFactory.createApplicationContext(DecoratorBenchModule, { logger: false });
  try {
    const service = app.get(LockService);
    const job = app.get(DecoratedJob);
    const runners = new Map<string, LockRunner>([
      ['LockService.withLock', (name, section) => service.withLock(`bench-decorator:${name}`, () => job.plain(name, section))],
      ['@WithLock', (name, section) => job.run(name, section)],
    ]);
    const rounds = await interleavedCycles(runners, ROUNDS, CYCLES_PER_ROUND);
    // Cycle time of the decorator over the direct call: the direct call's cycles/s over the decorator's.
    const ratio = pairedRatio(rounds.get('LockService.withLock')!, rounds.get('@WithLock')!);
    console.log(
      `memory backend, ${ROUNDS} rounds x ${CYCLES_PER_ROUND} cycles: @WithLock cycle time ${ratio.median.toFixed(3)}x ` +
        `LockService.withLock's (quartiles ${ratio.p25.toFixed(3)}-${ratio.p75.toFixed(3)})`,
    );
    recordTarget("@WithLock cycle time vs LockService.withLock's (memory)", ratio.median, '<=', 1.05);
  } finally {
    await app.close();
  }
}
