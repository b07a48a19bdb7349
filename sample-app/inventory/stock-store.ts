/** One product's stock and the count of buyers who got one (the "lucky" counter). */
export interface StockRecord {
  stock: number;
  lucky: number;
}

/** A write carried a fencing token lower than one the store already accepted: a stale holder. */
export class StaleFencingTokenError extends Error {
  constructor(
    readonly sku: string,
    readonly fencingToken: bigint,
    readonly highestSeen: bigint,
  ) {
    super(`Refused a write to "${sku}" with fencing token ${fencingToken}: the store already accepted ${highestSeen}.`);
    this.name = new.target.name;
  }
}

/**
 * Where the inventory lives. Reads and writes are separate calls on purpose (read, decide,
 * write): only the lock keeps concurrent buyers from overselling. Each write carries the
 * writer's fencing token, and the store itself refuses a token lower than the highest it has
 * accepted for that sku, atomically with the write.
 */
export interface StockStore {
  /** Sets the stock, zeroes the lucky counter and forgets fencing tokens seen. */
  seed(sku: string, stock: number): Promise<void>;
  read(sku: string): Promise<StockRecord>;
  /** Throws StaleFencingTokenError when `fencingToken` is below the highest accepted one. */
  write(sku: string, record: StockRecord, fencingToken: bigint): Promise<void>;
  close(): Promise<void>;
}

export const STOCK_STORE = Symbol('STOCK_STORE');
