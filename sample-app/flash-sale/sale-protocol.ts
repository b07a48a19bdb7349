import type { Connection } from '../backends/sample-backend';
import type { BuyerResults } from './buyers';

/** What the driver tells a buyer process (in its environment). */
export interface WorkerTask {
  backend: string;
  connection: Connection;
  sku: string;
  users: string[];
  lock: boolean;
}

/** What a buyer process tells the driver. The driver's only message back is "go". */
export type WorkerMessage = { type: 'ready' } | { type: 'done'; results: BuyerResults };
