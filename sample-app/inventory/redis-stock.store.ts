import type { Redis } from 'ioredis';
import { StaleFencingTokenError, type StockRecord, type StockStore } from './stock-store';

/**
 * KEYS[1] the sku's hash {stock, lucky, fence}. ARGV: stock, lucky, fencing token.
 * Refuses a token below the highest accepted one, atomically with the write.
 */
const FENCED_WRITE = `
local seen = redis.call('hget', KEYS[1], 'fence')
if seen and tonumber(seen) > tonumber(ARGV[3]) then return seen end
redis.call('hset', KEYS[1], 'stock', ARGV[1], 'lucky', ARGV[2], 'fence', ARGV[3])
return false
`;

/**
 * The stock in Redis, one hash per sku, shared by every buyer process. Reads and writes are
 * separate round trips on purpose: only the lock keeps the read-modify-write from overselling.
 */
export class RedisStockStore implements StockStore {
  constructor(private readonly redis: Redis) {}

  async seed(sku: string, stock: number): Promise<void> {
    await this.redis.multi().del(stockKey(sku)).hset(stockKey(sku), 'stock', stock, 'lucky', 0, 'fence', 0).exec();
  }

  async read(sku: string): Promise<StockRecord> {
    const [stock, lucky] = await this.redis.hmget(stockKey(sku), 'stock', 'lucky');
    return { stock: Number(stock ?? 0), lucky: Number(lucky ?? 0) };
  }

  async write(sku: string, record: StockRecord, fencingToken: bigint): Promise<void> {
    const seen = (await this.redis.eval(FENCED_WRITE, 1, stockKey(sku), record.stock, record.lucky, fencingToken.toString())) as string | null;
    if (seen !== null) throw new StaleFencingTokenError(sku, fencingToken, BigInt(seen));
  }

  async close(): Promise<void> {
    await this.redis.quit();
  }
}

const stockKey = (sku: string) => `inventory:stock:${sku}`;
