/**
 * One product's stock and its "lucky" counter (sales counted by the buyers themselves). Both are
 * read, decided on and written back by a buyer, so without the lock both lose updates.
 */
export interface StockRecord {
  stock: number;
  lucky: number;
}

/** What a buyer writes back: the new record and, for a sale, who got the item. */
export interface StockWrite extends StockRecord {
  /**
   * Appended to the sku's winners by the store, in the same fenced, atomic write as the record:
   * a stale holder's refused write records no winner either.
   */
  winner?: string;
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
  /** Sets the stock, zeroes the lucky counter, clears the winners and forgets fencing tokens seen. */
  seed(sku: string, stock: number): Promise<void>;
  read(sku: string): Promise<StockRecord>;
  /** The buyers who got one, in the order their writes were accepted (a name twice if it won twice). */
  winners(sku: string): Promise<string[]>;
  /** Throws StaleFencingTokenError when `fencingToken` is below the highest accepted one. */
  write(sku: string, update: StockWrite, fencingToken: bigint): Promise<void>;
  close(): Promise<void>;
}

export const STOCK_STORE = Symbol('STOCK_STORE');
