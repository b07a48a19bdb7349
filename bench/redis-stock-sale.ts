import type { Redis } from 'ioredis';
import type { LockRunner } from './workloads';

/** One sale's outcome: how long it took, and whether the stock on Redis came out right. */
export interface StockSaleResult {
  makespanMs: number;
  invariantHolds: boolean;
}

/**
 * The critical section of issue 13's sale, with the stock on Redis: GET the stock and, if any is
 * left, SET it one lower and INCR the winners counter. Three round trips that only a lock keeps
 * from overselling.
 */
async function buy(data: Redis, stockKey: string, winnersKey: string): Promise<void> {
  const left = Number(await data.get(stockKey));
  if (left > 0) {
    await data.set(stockKey, left - 1);
    await data.incr(winnersKey);
  }
}

async function seeded(data: Redis, stock: number): Promise<{ stockKey: string; winnersKey: string }> {
  const id = `${process.pid}-${Date.now()}-${Math.random().toString(36).slice(2)}`;
  const keys = { stockKey: `bench-stock:${id}`, winnersKey: `bench-winners:${id}` };
  await data.set(keys.stockKey, stock);
  return keys;
}

async function checked(data: Redis, keys: { stockKey: string; winnersKey: string }, stock: number, started: number): Promise<StockSaleResult> {
  const makespanMs = performance.now() - started;
  const [left, winners] = (await Promise.all([data.get(keys.stockKey), data.get(keys.winnersKey)])).map(Number);
  await data.del(keys.stockKey, keys.winnersKey);
  return { makespanMs, invariantHolds: left + winners === stock && left >= 0 };
}

/** Every buyer of every connection at once on one lock name; connection i's buyers use `data[i]`. */
export async function redisStockSale(runners: LockRunner[], data: Redis[], buyersPerConnection: number, stock: number): Promise<StockSaleResult> {
  const keys = await seeded(data[0], stock);
  const name = `bench-stock-sale-${keys.stockKey}`;
  const started = performance.now();
  await Promise.all(
    runners.flatMap((run, i) => Array.from({ length: buyersPerConnection }, () => run(name, () => buy(data[i], keys.stockKey, keys.winnersKey)))),
  );
  return checked(data[0], keys, stock, started);
}

/**
 * The floor no lock can beat: the same critical sections one after another on one connection,
 * with no lock at all (the lock's job, one at a time, done for free).
 */
export async function redisStockFloor(data: Redis, buyers: number, stock: number): Promise<StockSaleResult> {
  const keys = await seeded(data, stock);
  const started = performance.now();
  for (let i = 0; i < buyers; i++) await buy(data, keys.stockKey, keys.winnersKey);
  return checked(data, keys, stock, started);
}
