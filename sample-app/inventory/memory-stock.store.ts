import { StaleFencingTokenError, type StockRecord, type StockStore } from './stock-store';

/** The stock in this process's memory; each call yields first, as a network store would. */
export class MemoryStockStore implements StockStore {
  private readonly records = new Map<string, StockRecord & { fence: bigint }>();

  async seed(sku: string, stock: number): Promise<void> {
    await yieldTurn();
    this.records.set(sku, { stock, lucky: 0, fence: 0n });
  }

  async read(sku: string): Promise<StockRecord> {
    await yieldTurn();
    const { stock, lucky } = this.records.get(sku) ?? { stock: 0, lucky: 0 };
    return { stock, lucky };
  }

  async write(sku: string, record: StockRecord, fencingToken: bigint): Promise<void> {
    await yieldTurn();
    const current = this.records.get(sku) ?? { stock: 0, lucky: 0, fence: 0n };
    if (fencingToken < current.fence) throw new StaleFencingTokenError(sku, fencingToken, current.fence);
    this.records.set(sku, { ...record, fence: fencingToken });
  }

  async close(): Promise<void> {}
}

const yieldTurn = () => new Promise<void>((resolve) => setImmediate(resolve));
