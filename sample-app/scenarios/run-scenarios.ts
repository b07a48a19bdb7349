import type { INestApplicationContext } from '@nestjs/common';
import { CatalogService } from './catalog.service';
import { CheckoutService, PAYMENT_PROVIDER_LIMIT } from './checkout.service';
import { WarehouseService } from './warehouse.service';

/** One scenario's outcome: what ran, and whether its invariant held. */
export interface ScenarioResult {
  readonly name: string;
  readonly ok: boolean;
  readonly detail: string;
}

/**
 * Runs the three scenarios in `app`. `modes`: the backend grants read locks and semaphores
 * (Redlock does not: those two are reported as skipped).
 */
export async function runScenarios(app: INestApplicationContext, modes: boolean): Promise<ScenarioResult[]> {
  const results: ScenarioResult[] = [];
  if (modes) {
    results.push(await catalog(app.get(CatalogService)));
    results.push(await checkout(app.get(CheckoutService)));
  } else {
    results.push({ name: 'catalog', ok: true, detail: 'skipped: this backend grants only the exclusive lock' });
    results.push({ name: 'checkout', ok: true, detail: 'skipped: this backend grants only the exclusive lock' });
  }
  results.push(await transfer(app.get(WarehouseService)));
  return results;
}

async function catalog(service: CatalogService): Promise<ScenarioResult> {
  await service.restock('tea', 3);
  const calls = Array.from({ length: 50 }, (_, i) => (i % 10 === 9 ? service.restock('tea', 3 + i) : service.price('tea')));
  await Promise.all(calls);
  const ok = service.readsDuringRestock === 0 && service.readers.most >= 2;
  return { name: 'catalog', ok, detail: `45 reads and 5 restocks (read-write lock): up to ${service.readers.most} readers at once, ${service.readsDuringRestock} reads during a restock` };
}

async function checkout(service: CheckoutService): Promise<ScenarioResult> {
  await Promise.all(Array.from({ length: 24 }, (_, i) => service.pay(`order-${i}`)));
  const most = service.providerCalls.most;
  return { name: 'checkout', ok: most === PAYMENT_PROVIDER_LIMIT, detail: `24 payments under a semaphore of ${PAYMENT_PROVIDER_LIMIT}: at most ${most} provider calls at once` };
}

async function transfer(service: WarehouseService): Promise<ScenarioResult> {
  service.set('north', 100);
  service.set('south', 100);
  const moves = Array.from({ length: 40 }, (_, i) => (i % 2 === 0 ? service.transfer('north', 'south', 3) : service.transfer('south', 'north', 2)));
  const done = (await Promise.all(moves)).filter(Boolean).length;
  const total = service.stockOf('north') + service.stockOf('south');
  return { name: 'transfer', ok: total === 200 && done === 40, detail: `40 transfers both ways under a two-name lock: ${done} done, ${total} units in all (200 before)` };
}
