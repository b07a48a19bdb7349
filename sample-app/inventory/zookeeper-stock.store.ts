import { createClient, Exception, type Client, type Stat } from 'node-zookeeper-client';
import { StaleFencingTokenError, type StockRecord, type StockStore } from './stock-store';

interface StoredStock extends StockRecord {
  /** Highest fencing token accepted, as a decimal string (JSON has no bigint). */
  fence: string;
}

/**
 * The stock in a ZooKeeper node per sku, `{ stock, lucky, fence }` as JSON, shared by every
 * buyer process. A write reads the node, refuses a token below the stored fence, and writes
 * back with the version it read (compare-and-set): a write that raced in between makes it
 * read and check again, so the fence check and the write are atomic together.
 */
export class ZooKeeperStockStore implements StockStore {
  private constructor(private readonly client: Client) {}

  static async connect(connectionString: string): Promise<ZooKeeperStockStore> {
    const client = createClient(connectionString, { sessionTimeout: 10_000, spinDelay: 100, retries: 3 });
    const connected = new Promise<void>((resolve) => client.once('connected', () => resolve()));
    client.connect();
    await connected;
    const store = new ZooKeeperStockStore(client);
    await store.call<string>((done) => client.mkdirp(ROOT, done));
    return store;
  }

  async seed(sku: string, stock: number): Promise<void> {
    const data = encode({ stock, lucky: 0, fence: '0' });
    try {
      await this.call<string>((done) => this.client.create(path(sku), data, done));
    } catch (error) {
      if ((error as Exception).getCode?.() !== Exception.NODE_EXISTS) throw error;
      await this.call<Stat>((done) => this.client.setData(path(sku), data, -1, done));
    }
  }

  async read(sku: string): Promise<StockRecord> {
    const { stock, lucky } = (await this.readStored(sku)).record;
    return { stock, lucky };
  }

  async write(sku: string, record: StockRecord, fencingToken: bigint): Promise<void> {
    for (;;) {
      const { record: stored, version } = await this.readStored(sku);
      if (fencingToken < BigInt(stored.fence)) throw new StaleFencingTokenError(sku, fencingToken, BigInt(stored.fence));
      try {
        await this.call<Stat>((done) =>
          this.client.setData(path(sku), encode({ ...record, fence: fencingToken.toString() }), version, done),
        );
        return;
      } catch (error) {
        if ((error as Exception).getCode?.() !== Exception.BAD_VERSION) throw error;
      }
    }
  }

  async close(): Promise<void> {
    this.client.close();
  }

  private async readStored(sku: string): Promise<{ record: StoredStock; version: number }> {
    try {
      const [data, stat] = await this.call<[Buffer, Stat]>((done) => this.client.getData(path(sku), (error, data, stat) => done(error, [data, stat])));
      return { record: JSON.parse(data.toString()) as StoredStock, version: stat.version };
    } catch (error) {
      if ((error as Exception).getCode?.() !== Exception.NO_NODE) throw error;
      return { record: { stock: 0, lucky: 0, fence: '0' }, version: -1 };
    }
  }

  private call<T>(start: (done: (error: Error | Exception | null, value: T) => void) => void): Promise<T> {
    return new Promise<T>((resolve, reject) => start((error, value) => (error ? reject(error) : resolve(value))));
  }
}

const ROOT = '/inventory-stock';
const path = (sku: string) => `${ROOT}/${encodeURIComponent(sku).replace(/\./g, '%2E')}`;
const encode = (stored: StoredStock) => Buffer.from(JSON.stringify(stored));
