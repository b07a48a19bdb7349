import { Inject, Injectable } from '@nestjs/common';
import { WithLock, currentLock } from '../../lib';
import { STOCK_STORE, type StockRecord, type StockStore } from './stock-store';

export interface Purchase {
  won: boolean;
  /** performance.now() when the buyer entered the critical section: the sale measures waits. */
  enteredAt: number;
}

/** A product as GET /inventory/:sku shows it. */
export interface StockView extends StockRecord {
  /** Who got one, in the order their purchases were written. */
  winners: string[];
}

@Injectable()
export class InventoryService {
  constructor(@Inject(STOCK_STORE) private readonly store: StockStore) {}

  /**
   * One buyer, one item. Read, decide, write: three steps another buyer could interleave with,
   * which only the lock on `stock:<sku>` prevents. The write carries the lock's fencing token,
   * so a holder that lost its lock (paused past its lease) cannot overwrite a newer holder, nor
   * be recorded as a winner.
   */
  @WithLock('stock:<0>')
  async buy(sku: string, user: string): Promise<Purchase> {
    return this.takeOne(sku, user, currentLock()!.fencingToken);
  }

  /** The same purchase with no lock, for `--no-lock`: shows the overselling the lock prevents. */
  async buyWithoutLock(sku: string, user: string): Promise<Purchase> {
    return this.takeOne(sku, user, 0n);
  }

  /** Under the same lock as a purchase: a restock landing between a buyer's read and write would be undone by it. */
  @WithLock('stock:<0>')
  async seed(sku: string, stock: number): Promise<void> {
    await this.store.seed(sku, stock);
  }

  async stockOf(sku: string): Promise<StockView> {
    const [record, winners] = await Promise.all([this.store.read(sku), this.store.winners(sku)]);
    return { ...record, winners };
  }

  private async takeOne(sku: string, user: string, fencingToken: bigint): Promise<Purchase> {
    const enteredAt = performance.now();
    const { stock, lucky } = await this.store.read(sku);
    if (stock <= 0) return { won: false, enteredAt };
    await this.store.write(sku, { stock: stock - 1, lucky: lucky + 1, winner: user }, fencingToken);
    return { won: true, enteredAt };
  }
}
