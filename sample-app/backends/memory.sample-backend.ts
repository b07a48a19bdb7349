import { MemoryStockStore } from '../inventory/memory-stock.store';
import type { SampleBackend } from './sample-backend';

/** The embedded default: lock and stock in this process, nothing to start. */
export const memorySampleBackend: SampleBackend = {
  multiProcess: false,
  async provision() {
    return { connection: {}, stop: async () => undefined };
  },
  lockBackend: () => ({ type: 'memory' }),
  stockStore: async () => new MemoryStockStore(),
};
