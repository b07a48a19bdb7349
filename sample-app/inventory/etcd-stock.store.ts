import { randomUUID } from 'node:crypto';
import { Etcd3 } from 'etcd3';
import { StaleFencingTokenError, type StockRecord, type StockStore, type StockWrite } from './stock-store';

/**
 * The stock in etcd, one key per sku: `<20-digit fencing token>|<JSON record>`. Zero-padding
 * makes etcd's byte-wise value comparison a numeric one, so a single transaction both checks
 * the fence and writes: "if value < (token + 1), i.e. highest accepted <= token, put the record
 * and the winner". Each winner is a key of its own under the sku's winners prefix.
 */
export class EtcdStockStore implements StockStore {
  private readonly client: Etcd3;

  constructor(hosts: string | string[]) {
    this.client = new Etcd3({ hosts });
  }

  async seed(sku: string, stock: number): Promise<void> {
    await this.client.delete().prefix(winnersOf(sku));
    await this.client.put(keyOf(sku)).value(encode({ stock, lucky: 0 }, 0n));
  }

  async read(sku: string): Promise<StockRecord> {
    const value = await this.client.get(keyOf(sku)).string();
    return value === null ? { stock: 0, lucky: 0 } : decode(value).record;
  }

  async winners(sku: string): Promise<string[]> {
    const { kvs } = await this.client.getAll().prefix(winnersOf(sku)).sort('Create', 'Ascend').exec();
    return kvs.map((kv) => kv.value.toString());
  }

  async write(sku: string, { stock, lucky, winner }: StockWrite, fencingToken: bigint): Promise<void> {
    const key = keyOf(sku);
    const puts = [this.client.put(key).value(encode({ stock, lucky }, fencingToken))];
    // A random name, not the token: buyers without the lock (--no-lock) all write with token 0.
    // Listing by create revision keeps the order the writes were accepted in.
    if (winner !== undefined) puts.push(this.client.put(winnersOf(sku) + randomUUID()).value(winner));
    const result = await this.client
      .if(key, 'Value', '<', pad(fencingToken + 1n))
      .then(...puts)
      .else(this.client.get(key))
      .commit();
    if (result.succeeded) return;
    const stored = result.responses[0]?.response_range?.kvs[0]?.value.toString();
    if (stored === undefined) throw new Error(`sku "${sku}" was never seeded`);
    throw new StaleFencingTokenError(sku, fencingToken, decode(stored).fence);
  }

  async close(): Promise<void> {
    this.client.close();
  }
}

const keyOf = (sku: string) => `sample-app/stock/${sku}`;
/** Encoded, so that no sku's prefix holds another's winners (`a/` would hold those of `a/b`). */
const winnersOf = (sku: string) => `sample-app/winners/${encodeURIComponent(sku)}/`;
const pad = (token: bigint) => token.toString().padStart(20, '0');
const encode = (record: StockRecord, fence: bigint) => `${pad(fence)}|${JSON.stringify(record)}`;

function decode(value: string): { fence: bigint; record: StockRecord } {
  const bar = value.indexOf('|');
  return { fence: BigInt(value.slice(0, bar)), record: JSON.parse(value.slice(bar + 1)) as StockRecord };
}
