import { Injectable } from '@nestjs/common';
import { WithLock } from '../../lib';
import { ConcurrencyGauge, pause } from './concurrency-gauge';

/**
 * A catalog read far more often than it changes: reads share the read lock of `catalog:<sku>`,
 * a restock takes it in write mode, so no read ever sees a price half-updated.
 */
@Injectable()
export class CatalogService {
  private readonly prices = new Map<string, { price: number; updating: boolean }>();
  readonly readers = new ConcurrencyGauge();
  /** Reads that ran while a restock was inside: the write lock must keep this at 0. */
  readsDuringRestock = 0;

  @WithLock('catalog:<0>', { mode: 'read' })
  async price(sku: string): Promise<number> {
    return this.readers.around(async () => {
      const entry = this.prices.get(sku) ?? { price: 0, updating: false };
      if (entry.updating) this.readsDuringRestock++;
      await pause(5);
      return entry.price;
    });
  }

  @WithLock('catalog:<0>')
  async restock(sku: string, price: number): Promise<void> {
    const entry = this.prices.get(sku) ?? { price: 0, updating: false };
    this.prices.set(sku, entry);
    entry.updating = true;
    await pause(5);
    entry.price = price;
    entry.updating = false;
  }
}
