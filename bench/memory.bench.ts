import { MemoryLockBackend, MemoryLockStore } from '../lib';
import { lockServiceOver } from './lock-services';
import { flashSale, medianFlashSale, uncontendedCycles, type LockRunner } from './workloads';
import { printFlashSale } from './report';
import { recordFigure } from './summary';

/** The embedded backend: no network, so this is the library's own overhead per cycle and handoff. */
export async function run(): Promise<void> {
  const store = new MemoryLockStore();
  const services = Array.from({ length: 4 }, () => lockServiceOver(new MemoryLockBackend(store)));
  const runners: LockRunner[] = services.map((service) => (name, section) => service.withLock(name, section, { waitTimeoutMs: 60_000 }));
  const cycles = await uncontendedCycles(runners[0], 7, 5_000);
  console.log(`uncontended acquire+release: ${Math.round(cycles.cyclesPerSecond)} cycles/s (median of 7 rounds)`);
  recordFigure('uncontended cycles/s', Math.round(cycles.cyclesPerSecond).toLocaleString('en-US'));
  const sale = await medianFlashSale(5, () => flashSale(runners, 50, 150));
  printFlashSale('this library (memory)', sale);
  recordFigure('flash-sale makespan', `${sale.makespanMs.toFixed(1)} ms`);
  await Promise.all(services.map((service) => service.onApplicationShutdown()));
}
