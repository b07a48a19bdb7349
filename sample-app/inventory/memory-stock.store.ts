import { StaleFencingTokenError, type StockRecord, type StockStore, type StockWrite } from './stock-store';

interface StoredStock extends StockRecord {
  winners: string[];
  fence: bigint;
}

/** The stock in this process's memory; each call yields first, as a network store would. */
export class MemoryStockStore implements StockStore {
  private readonly records = new Map<string, StoredStock>();

  async seed(sku: string, stock: number): Promise<void> {
    await yieldTurn();
    this.records.set(sku, { stock, lucky: 0, winners: [], fence: 0n });
  }

  async read(sku: string): Promise<StockRecord> {
    await yieldTurn();
    const { stock, lucky } = this.stored(sku);
    return { stock, lucky };
  }

  async winners(sku: string): Promise<string[]> {
    await yieldTurn();
    return [...this.stored(sku).winners];
  }

  async write(sku: string, { stock, lucky, winner }: StockWrite, fencingToken: bigint): Promise<void> {
    await yieldTurn();
    const current = this.stored(sku);
    if (fencingToken < current.fence) throw new StaleFencingTokenError(sku, fencingToken, current.fence);
    if (winner !== undefined) current.winners.push(winner);
    this.records.set(sku, { stock, lucky, winners: current.winners, fence: fencingToken });
  }

  async close(): Promise<void> {}

  private stored(sku: string): StoredStock {
    return this.records.get(sku) ?? { stock: 0, lucky: 0, winners: [], fence: 0n };
  }
}

const yieldTurn = () => new Promise<void>((resolve) => setImmediate(resolve));
