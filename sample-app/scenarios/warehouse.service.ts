import { Injectable } from '@nestjs/common';
import { WithLock } from '../../lib';
import { pause } from './concurrency-gauge';

/**
 * Stock moved between two warehouses under one lock of both names: two transfers in opposite
 * directions cannot deadlock (the names are taken in one order) nor lose an update.
 */
@Injectable()
export class WarehouseService {
  private readonly stock = new Map<string, number>();

  stockOf(warehouse: string): number {
    return this.stock.get(warehouse) ?? 0;
  }

  set(warehouse: string, units: number): void {
    this.stock.set(warehouse, units);
  }

  @WithLock(['warehouse:<0>', 'warehouse:<1>'])
  async transfer(from: string, to: string, units: number): Promise<boolean> {
    const [available, receiving] = [this.stockOf(from), this.stockOf(to)];
    if (available < units) return false;
    // A read, a pause, a write: another transfer between them would lose one of the two updates.
    await pause(1);
    this.stock.set(from, available - units);
    this.stock.set(to, receiving + units);
    return true;
  }
}
