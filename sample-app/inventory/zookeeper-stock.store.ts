import { createClient, CreateMode, Exception, type Client, type Stat } from 'node-zookeeper-client';
import { StaleFencingTokenError, type StockRecord, type StockStore, type StockWrite } from './stock-store';

interface StoredStock extends StockRecord {
  /** Highest fencing token accepted, as a decimal string (JSON has no bigint). */
  fence: string;
}

/**
 * The stock in a ZooKeeper node per sku, `{ stock, lucky, fence }` as JSON, its winners in
 * sequential child nodes, shared by every buyer process. A write reads the node, refuses a
 * token below the stored fence, and in one transaction writes back with the version it read
 * (compare-and-set) and creates the winner's node: a write that raced in between makes it read
 * and check again, so the fence check, the write and the winner are atomic together.
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
    try {
      await this.call<string>((done) => this.client.create(path(sku), done));
    } catch (error) {
      if ((error as Exception).getCode?.() !== Exception.NODE_EXISTS) throw error;
      const winners = await this.winnerNodes(sku);
      await Promise.all(winners.map((node) => this.call<void>((done) => this.client.remove(node, -1, (error) => done(error, undefined)))));
    }
    // Set after the create rather than in it, so the version a write compares is never 0:
    // node-zookeeper-client's transactions send version 0 as -1, "any version".
    await this.call<Stat>((done) => this.client.setData(path(sku), encode({ stock, lucky: 0, fence: '0' }), -1, done));
  }

  async read(sku: string): Promise<StockRecord> {
    const { stock, lucky } = (await this.readStored(sku)).record;
    return { stock, lucky };
  }

  async winners(sku: string): Promise<string[]> {
    const nodes = await this.winnerNodes(sku);
    const names = nodes.map((node) => this.call<Buffer>((done) => this.client.getData(node, (error, data) => done(error, data))));
    return (await Promise.all(names)).map((name) => name.toString());
  }

  async write(sku: string, { stock, lucky, winner }: StockWrite, fencingToken: bigint): Promise<void> {
    const data = encode({ stock, lucky, fence: fencingToken.toString() });
    for (;;) {
      const { record: stored, version } = await this.readStored(sku);
      if (fencingToken < BigInt(stored.fence)) throw new StaleFencingTokenError(sku, fencingToken, BigInt(stored.fence));
      const transaction = this.client.transaction().setData(path(sku), data, version);
      if (winner !== undefined) transaction.create(`${path(sku)}/${WINNER}`, Buffer.from(winner), CreateMode.PERSISTENT_SEQUENTIAL);
      try {
        await this.call<unknown>((done) => transaction.commit(done));
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

  /** The paths of the sku's winner nodes, in the order they were created (their zero-padded sequence). */
  private async winnerNodes(sku: string): Promise<string[]> {
    try {
      const children = await this.call<string[]>((done) => this.client.getChildren(path(sku), done));
      return children.sort().map((child) => `${path(sku)}/${child}`);
    } catch (error) {
      if ((error as Exception).getCode?.() !== Exception.NO_NODE) throw error;
      return [];
    }
  }

  private call<T>(start: (done: (error: Error | Exception | null, value: T) => void) => void): Promise<T> {
    return new Promise<T>((resolve, reject) => start((error, value) => (error ? reject(error) : resolve(value))));
  }
}

const ROOT = '/inventory-stock';
const WINNER = 'winner-';
const path = (sku: string) => `${ROOT}/${encodeURIComponent(sku).replace(/\./g, '%2E')}`;
const encode = (stored: StoredStock) => Buffer.from(JSON.stringify(stored));
