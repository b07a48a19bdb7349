import type { Pool } from 'pg';
import { StaleFencingTokenError, type StockRecord, type StockStore, type StockWrite } from './stock-store';

/** Created once by whichever buyer process comes first (the advisory lock serialises them). */
const SCHEMA = `
SELECT pg_advisory_xact_lock(hashtext('inventory schema'));
CREATE TABLE IF NOT EXISTS inventory_stock (sku text PRIMARY KEY, stock integer NOT NULL, lucky integer NOT NULL, fence bigint NOT NULL);
CREATE TABLE IF NOT EXISTS inventory_winners (id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY, sku text NOT NULL, winner text NOT NULL);
`;

/**
 * The fenced write: one statement. The UPDATE's `fence <= $4` is the storage-side check that
 * makes a stale holder harmless: a write whose token is below the highest accepted one changes
 * nothing, and records no winner, because the winner's INSERT reads the UPDATE's result.
 */
const FENCED_WRITE = `
WITH written AS (
  UPDATE inventory_stock SET stock = $2, lucky = $3, fence = $4 WHERE sku = $1 AND fence <= $4 RETURNING sku
), won AS (
  INSERT INTO inventory_winners (sku, winner) SELECT sku, $5 FROM written WHERE $5::text IS NOT NULL
)
SELECT (SELECT count(*) FROM written)::int AS written, (SELECT fence::text FROM inventory_stock WHERE sku = $1) AS seen`;

/**
 * The stock in PostgreSQL, shared by every buyer process. Reads and writes are separate
 * statements on purpose: only the lock keeps the read-modify-write from overselling.
 */
export class PostgresStockStore implements StockStore {
  private constructor(private readonly pool: Pool) {}

  static async connect(url: string): Promise<PostgresStockStore> {
    const { Pool } = await import('pg');
    const pool = new Pool({ connectionString: url, max: 4 });
    pool.on('error', () => undefined);
    await pool.query(SCHEMA);
    return new PostgresStockStore(pool);
  }

  async seed(sku: string, stock: number): Promise<void> {
    await this.pool.query(
      `WITH gone AS (DELETE FROM inventory_winners WHERE sku = $1)
       INSERT INTO inventory_stock (sku, stock, lucky, fence) VALUES ($1, $2, 0, 0)
       ON CONFLICT (sku) DO UPDATE SET stock = $2, lucky = 0, fence = 0`,
      [sku, stock],
    );
  }

  async read(sku: string): Promise<StockRecord> {
    const { rows } = await this.pool.query('SELECT stock, lucky FROM inventory_stock WHERE sku = $1', [sku]);
    return rows.length === 0 ? { stock: 0, lucky: 0 } : { stock: rows[0].stock, lucky: rows[0].lucky };
  }

  async winners(sku: string): Promise<string[]> {
    const { rows } = await this.pool.query('SELECT winner FROM inventory_winners WHERE sku = $1 ORDER BY id', [sku]);
    return rows.map((row) => row.winner);
  }

  async write(sku: string, { stock, lucky, winner }: StockWrite, fencingToken: bigint): Promise<void> {
    const { rows } = await this.pool.query(FENCED_WRITE, [sku, stock, lucky, fencingToken.toString(), winner ?? null]);
    if (rows[0].written === 0) throw new StaleFencingTokenError(sku, fencingToken, BigInt(rows[0].seen ?? 0));
  }

  async close(): Promise<void> {
    await this.pool.end();
  }
}
