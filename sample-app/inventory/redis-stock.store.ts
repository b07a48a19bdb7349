import type { Redis } from 'ioredis';
import { StaleFencingTokenError, type StockRecord, type StockStore, type StockWrite } from './stock-store';

/**
 * KEYS[1] the sku's hash {stock, lucky, fence}, KEYS[2] its list of winners.
 * ARGV: stock, lucky, fencing token, and the winner when the write is a sale.
 * Refuses a token below the highest accepted one, atomically with the write and the append.
 */
const FENCED_WRITE = `
local seen = redis.call('hget', KEYS[1], 'fence')
if seen and tonumber(seen) > tonumber(ARGV[3]) then return seen end
redis.call('hset', KEYS[1], 'stock', ARGV[1], 'lucky', ARGV[2], 'fence', ARGV[3])
if ARGV[4] then redis.call('rpush', KEYS[2], ARGV[4]) end
return false
`;

/**
 * The stock in Redis, one hash and one list per sku, shared by every buyer process. Reads and
 * writes are separate round trips on purpose: only the lock keeps the read-modify-write from
 * overselling.
 */
export class RedisStockStore implements StockStore {
  constructor(private readonly redis: Redis) {}

  async seed(sku: string, stock: number): Promise<void> {
    const { record, winners } = keysOf(sku);
    await this.redis.multi().del(record, winners).hset(record, 'stock', stock, 'lucky', 0, 'fence', 0).exec();
  }

  async read(sku: string): Promise<StockRecord> {
    const [stock, lucky] = await this.redis.hmget(keysOf(sku).record, 'stock', 'lucky');
    return { stock: Number(stock ?? 0), lucky: Number(lucky ?? 0) };
  }

  winners(sku: string): Promise<string[]> {
    return this.redis.lrange(keysOf(sku).winners, 0, -1);
  }

  async write(sku: string, { stock, lucky, winner }: StockWrite, fencingToken: bigint): Promise<void> {
    const { record, winners } = keysOf(sku);
    const args = [stock, lucky, fencingToken.toString(), ...(winner === undefined ? [] : [winner])];
    const seen = (await this.redis.eval(FENCED_WRITE, 2, record, winners, ...args)) as string | null;
    if (seen !== null) throw new StaleFencingTokenError(sku, fencingToken, BigInt(seen));
  }

  async close(): Promise<void> {
    await this.redis.quit();
  }
}

/** One hash tag for both keys: a script may touch several keys on Redis Cluster only within one slot. */
const keysOf = (sku: string) => ({ record: `inventory:{${sku}}:stock`, winners: `inventory:{${sku}}:winners` });
