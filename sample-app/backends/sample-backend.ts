import type { BackendOptions } from '../../lib';
import type { StockStore } from '../inventory/stock-store';

/** Connection settings handed from the flash-sale driver to its worker processes (JSON-safe). */
export type Connection = Record<string, string>;

/**
 * How the sample app runs on one backend: where the lock server is, what the module is given,
 * and where the stock lives so that every process sees the same stock.
 */
export interface SampleBackend {
  /** False for memory: the lock and the stock live in one process. */
  readonly multiProcess: boolean;
  /**
   * The server to use: the one named by the user's environment (e.g. REDIS_URL), else a
   * throwaway one started on a free loopback port and stopped by `stop`.
   */
  provision(): Promise<{ connection: Connection; stop(): Promise<void> }>;
  lockBackend(connection: Connection): BackendOptions;
  stockStore(connection: Connection): Promise<StockStore>;
}
