import { createClient, type Client } from 'node-zookeeper-client';

/** A plain client to look at (and vandalise) the tree the backend builds, as an operator would. */
export class ZooKeeperInspector {
  private constructor(private readonly client: Client) {}

  static async connect(connectionString: string, digest?: string): Promise<ZooKeeperInspector> {
    const client = createClient(connectionString, { sessionTimeout: 10_000, spinDelay: 100 });
    if (digest) client.addAuthInfo('digest', Buffer.from(digest));
    const connected = new Promise<void>((resolve) => client.once('connected', () => resolve()));
    client.connect();
    await connected;
    return new ZooKeeperInspector(client);
  }

  /** Children of `path`, or [] when it does not exist. */
  children(path: string): Promise<string[]> {
    return new Promise((resolve, reject) =>
      this.client.getChildren(path, (error, children) => {
        if (!error) return resolve(children);
        if ((error as { code?: number }).code === -101) return resolve([]);
        reject(error);
      }),
    );
  }

  /** Every lock node under `root`, as `parent/node`. */
  async lockNodes(root: string): Promise<string[]> {
    const nodes: string[] = [];
    for (const parent of await this.children(root)) {
      for (const node of await this.children(`${root}/${parent}`)) nodes.push(`${parent}/${node}`);
    }
    return nodes;
  }

  /** The node's czxid as a number (the fencing token of a lock node), or undefined when it does not exist. */
  czxid(path: string): Promise<bigint | undefined> {
    return new Promise((resolve, reject) =>
      this.client.exists(path, (error, stat) => (error ? reject(error) : resolve(stat ? stat.czxid.readBigInt64BE(0) : undefined))),
    );
  }

  remove(path: string): Promise<void> {
    return new Promise((resolve, reject) => this.client.remove(path, -1, (error) => (error ? reject(error) : resolve())));
  }

  close(): void {
    this.client.close();
  }
}
