import { Inject, Injectable } from '@nestjs/common';
import { WithLock, currentLock } from '../../lib';
import { STOCK_STORE, type StockStore } from './stock-store';

export interface Purchase {
  won: boolean;
  /** performance.now() when the buyer entered the critical section: the sale measures waits. */
  enteredAt: number;
}

@Injectable()
export class InventoryService {
  constructor(@Inject(STOCK_STORE) private readonly store: StockStore) {}

  /**
   * One buyer, one item. Read, decide, write: three steps another buyer could interleave with,
   * which only the lock on `stock:<sku>` prevents. The write carries the lock's fencing token,
   * so a holder that lost its lock (paused past its lease) cannot overwrite a newer holder.
   */
  @WithLock('stock:<0>')
  async buy(sku: string, _user: string): Promise<Purchase> {
    return this.takeOne(sku, currentLock()!.fencingToken);
  }

  /** The same purchase with no lock, for `--no-lock`: shows the overselling the lock prevents. */
  async buyWithoutLock(sku: string, _user: string): Promise<Purchase> {
    return this.takeOne(sku, 0n);
  }

  async seed(sku: string, stock: number): Promise<void> {
    await this.store.seed(sku, stock);
  }

  stockOf(sku: string) {
    return this.store.read(sku);
  }

  private async takeOne(sku: string, fencingToken: bigint): Promise<Purchase> {
    const enteredAt = performance.now();
    const { stock, lucky } = await this.store.read(sku);
    if (stock <= 0) return { won: false, enteredAt };
    await this.store.write(sku, { stock: stock - 1, lucky: lucky + 1 }, fencingToken);
    return { won: true, enteredAt };
  }
}
