import { subscribe, tracingChannel, unsubscribe } from 'node:diagnostics_channel';
import { Registry } from 'prom-client';
import { LOCK_CHANNELS, MemoryLockBackend } from '../lib';
import { recordLockMetrics } from '../lib/instrumentation/lock-metrics';
import { lockServiceOver } from './lock-services';
import { median } from './stats';
import { uncontendedCycles, type LockRunner } from './workloads';
import { progress } from './progress';
import { recordFigure } from './summary';

const ROUNDS = 15;
const CYCLES_PER_ROUND = 5_000;

/** Subscribes a no-op listener to every channel: the cost of publishing, not of a subscriber's work. */
function noOpSubscribers(): () => void {
  const ignore = () => undefined;
  const plain = [LOCK_CHANNELS.acquired, LOCK_CHANNELS.released, LOCK_CHANNELS.lost, LOCK_CHANNELS.timedOut, LOCK_CHANNELS.skipped];
  for (const name of plain) subscribe(name, ignore);
  const handlers = { start: ignore, end: ignore, asyncStart: ignore, asyncEnd: ignore, error: ignore };
  tracingChannel(LOCK_CHANNELS.acquire).subscribe(handlers);
  return () => {
    for (const name of plain) unsubscribe(name, ignore);
    tracingChannel(LOCK_CHANNELS.acquire).unsubscribe(handlers);
  };
}

/**
 * The uncontended memory cycle (no network: the library's own cost is all there is) with no
 * subscriber, with no-op subscribers on every channel, and with the prom-client metrics
 * recorder; in rounds, each round running the three in a shuffled order.
 */
export async function run(): Promise<void> {
  const service = lockServiceOver(new MemoryLockBackend());
  const runner: LockRunner = (name, section) => service.withLock(name, section);
  const variants: Record<string, () => () => void> = {
    'no subscriber': () => () => undefined,
    'no-op subscribers on every channel': noOpSubscribers,
    'prom-client metrics (metrics: true)': () => recordLockMetrics(new Registry()),
  };
  const results = new Map<string, number[]>(Object.keys(variants).map((name) => [name, []]));
  for (const start of Object.values(variants)) {
    const stop = start();
    await uncontendedCycles(runner, 1, CYCLES_PER_ROUND); // warm-up
    stop();
  }
  for (let round = 0; round < ROUNDS; round++) {
    for (const name of Object.keys(variants).sort(() => Math.random() - 0.5)) {
      const stop = variants[name]();
      results.get(name)!.push((await uncontendedCycles(runner, 1, CYCLES_PER_ROUND)).cyclesPerSecond);
      stop();
    }
    progress('uncontended round', round + 1, ROUNDS);
  }
  const baseline = median(results.get('no subscriber')!);
  console.log('| uncontended memory cycle | cycles/s (median) | us per cycle | vs no subscriber |');
  console.log('| --- | --- | --- | --- |');
  for (const [name, perSecond] of results) {
    const rate = median(perSecond);
    console.log(`| ${name} | ${Math.round(rate).toLocaleString('en-US')} | ${(1e6 / rate).toFixed(2)} | ${(rate / baseline).toFixed(2)}x |`);
    if (name !== 'no subscriber') recordFigure(`memory cycles/s with ${name}, vs none`, `${(rate / baseline).toFixed(2)}x`);
  }
  await service.onApplicationShutdown();
}
