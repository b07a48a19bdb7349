import { createClient, CreateMode, type Client, type Exception, type Option } from 'node-zookeeper-client';

/**
 * How long the inspector waits for a connection or an answer. node-zookeeper-client has no
 * handshake timeout, and a ZooKeeper 3.8 server that is starting can accept a connection and
 * never read it (seen in the restart fault test: the inspector's client sat on such a connection
 * until its session expired, and the test waited forever).
 */
const ANSWER_TIMEOUT_MS = 3_000;
/** Goes a read gets, each after the first on a new client, before the test fails with its error. */
const READ_ROUNDS = 5;
/** Errors after which a read is worth repeating on a new client: CONNECTION_LOSS, SESSION_EXPIRED. */
const TRANSIENT_CODES = new Set([-4, -112]);
const NO_NODE = -101;

/** A node-zookeeper-client callback: its errors are Exceptions (a code and a message). */
type Done<T> = (error: Error | Exception | null, value?: T) => void;

class Unanswered extends Error {}

/**
 * A plain client to look at (and vandalise) the tree the backend builds, as an operator would.
 * Reads survive a server restart: one that gets no answer, or loses its connection, is asked
 * again on a new client. Writes are asked once (an ephemeral node lives with this client's
 * session) and fail rather than wait forever.
 */
export class ZooKeeperInspector {
  /** How many times a read went unanswered or lost its connection and was asked again on a new client. */
  newClients = 0;

  private constructor(
    private readonly connectionString: string,
    private readonly digest: string | undefined,
    private client: Promise<Client>,
  ) {}

  static async connect(connectionString: string, digest?: string): Promise<ZooKeeperInspector> {
    const client = openClient(connectionString, { sessionTimeout: 10_000, spinDelay: 100 }, digest);
    await client;
    return new ZooKeeperInspector(connectionString, digest, client);
  }

  /**
   * Ends another client's session at the server, as a client of that session can: connects with
   * its id and password and closes it. The server deletes the session's ephemeral nodes and, when
   * the owner reconnects, tells it the session expired.
   */
  static async endSession(connectionString: string, sessionId: Buffer, sessionPassword: Buffer): Promise<void> {
    // node-zookeeper-client takes these options (ConnectionManager), its published types do not list them.
    const options = { sessionTimeout: 10_000, spinDelay: 100, sessionId, sessionPassword } as Partial<Option>;
    const client = await openClient(connectionString, options);
    await answered<void>(`closing session ${sessionId.toString('hex')}`, (done) => {
      client.once('disconnected', () => done(null));
      client.close();
    });
  }

  /** Children of `path`, or [] when it does not exist. */
  children(path: string): Promise<string[]> {
    return this.read(`the children of ${path}`, (client, done) =>
      client.getChildren(path, (error, children) => (codeOf(error) === NO_NODE ? done(null, []) : done(error, children))),
    );
  }

  /** The data of `path` as text, or undefined when it does not exist. */
  text(path: string): Promise<string | undefined> {
    return this.read(`the data of ${path}`, (client, done) =>
      client.getData(path, (error, data) => (codeOf(error) === NO_NODE ? done(null, undefined) : done(error, data?.toString()))),
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

  /** The node's czxid as a number (a lock node's tokens are `(czxid << 16) + turn`), or undefined when it does not exist. */
  czxid(path: string): Promise<bigint | undefined> {
    return this.read(`the stat of ${path}`, (client, done) =>
      client.exists(path, (error, stat) => done(error, stat ? stat.czxid.readBigInt64BE(0) : undefined)),
    );
  }

  /**
   * A lock node under `parent` (created if missing) that is not this library's: another
   * process's holder, as the tree shows it. Its path; it goes when removed or at close().
   */
  async createLockNode(parent: string): Promise<string> {
    const client = await this.client;
    return answered(`creating a lock node under ${parent}`, (done) =>
      client.mkdirp(parent, (error) => {
        if (error) return done(error);
        client.create(`${parent}/_c_operator-lock-`, CreateMode.EPHEMERAL_SEQUENTIAL, done);
      }),
    );
  }

  async remove(path: string): Promise<void> {
    const client = await this.client;
    return answered(`removing ${path}`, (done) => client.remove(path, -1, (error) => done(error)));
  }

  close(): void {
    void this.client.then((client) => client.close(), () => undefined);
  }

  private async read<T>(what: string, request: (client: Client, done: Done<T>) => void): Promise<T> {
    for (let round = 1; ; round++) {
      try {
        const client = await this.client;
        return await answered(what, (done) => request(client, done));
      } catch (error) {
        const transient = error instanceof Unanswered || TRANSIENT_CODES.has(codeOf(error) ?? 0);
        if (!transient || round === READ_ROUNDS) throw error;
        this.close();
        this.newClients++;
        this.client = openClient(this.connectionString, { sessionTimeout: 10_000, spinDelay: 100 }, this.digest);
      }
    }
  }
}

/** A connected client; rejects (and closes it) when no session is established in time. */
function openClient(connectionString: string, options: Partial<Option>, digest?: string): Promise<Client> {
  const client = createClient(connectionString, options);
  if (digest) client.addAuthInfo('digest', Buffer.from(digest));
  const connected = answered<Client>(`a session with ZooKeeper at ${connectionString}`, (done) => {
    client.once('connected', () => done(null, client));
    client.connect();
  });
  connected.catch(() => client.close());
  return connected;
}

/** The value `start` hands to `done`, or a failure naming `what` after ANSWER_TIMEOUT_MS. */
function answered<T>(what: string, start: (done: Done<T>) => void): Promise<T> {
  return new Promise<T>((resolve, reject) => {
    const timer = setTimeout(() => reject(new Unanswered(`no answer from ZooKeeper within ${ANSWER_TIMEOUT_MS} ms for ${what}`)), ANSWER_TIMEOUT_MS);
    start((error, value) => {
      clearTimeout(timer);
      if (error) reject(error);
      else resolve(value as T);
    });
  });
}

function codeOf(error: unknown): number | undefined {
  const code = (error as { code?: unknown } | null)?.code;
  return typeof code === 'number' ? code : undefined;
}
