import { createClient, CreateMode, type Client, type Option } from 'node-zookeeper-client';

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

  /**
   * Ends another client's session at the server, as a client of that session can: connects with
   * its id and password and closes it. The server deletes the session's ephemeral nodes and, when
   * the owner reconnects, tells it the session expired.
   */
  static async endSession(connectionString: string, sessionId: Buffer, sessionPassword: Buffer): Promise<void> {
    // node-zookeeper-client takes these options (ConnectionManager), its published types do not list them.
    const options = { sessionTimeout: 10_000, spinDelay: 100, sessionId, sessionPassword } as Partial<Option>;
    const client = createClient(connectionString, options);
    const connected = new Promise<void>((resolve) => client.once('connected', () => resolve()));
    client.connect();
    await connected;
    const closed = new Promise<void>((resolve) => client.once('disconnected', () => resolve()));
    client.close();
    await closed;
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

  /**
   * A lock node under `parent` (created if missing) that is not this library's: another
   * process's holder, as the tree shows it. Its path; it goes when removed or at close().
   */
  createLockNode(parent: string): Promise<string> {
    return new Promise((resolve, reject) =>
      this.client.mkdirp(parent, (error) => {
        if (error) return reject(error);
        this.client.create(`${parent}/_c_operator-lock-`, CreateMode.EPHEMERAL_SEQUENTIAL, (error, path) => (error ? reject(error) : resolve(path)));
      }),
    );
  }

  remove(path: string): Promise<void> {
    return new Promise((resolve, reject) => this.client.remove(path, -1, (error) => (error ? reject(error) : resolve())));
  }

  close(): void {
    this.client.close();
  }
}
