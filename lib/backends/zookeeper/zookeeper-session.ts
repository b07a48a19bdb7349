import { deadlines, type Deadline } from '../../deadlines';
import { DistributedLockError, LockBackendError } from '../../errors';
import { driftAllowanceMs } from '../../lock-defaults';
import { closeClient, ZkCode, zkCode, type ZkAcl, type ZkClient, type ZkError, type ZkModule, type ZkStat, type ZkWatcher } from './zookeeper-client';
import { permissionMask, type ResolvedZooKeeperOptions } from './zookeeper-options';
import { OneShot } from './one-shot';
import { NodeWatches } from './zookeeper-watches';

/**
 * An idle session is heard from at least every 2/6 of its timeout (a heartbeat is sent when
 * nothing was answered for 1/6), leaving 2/3 of the timeout for a slow reply or a busy event
 * loop before a healthy session would be taken for dead.
 */
const HEARTBEATS_PER_TIMEOUT = 6;

/** What one session is opened with: the backend's options, the session timeout settled. */
export type ZooKeeperSessionOptions = Omit<ResolvedZooKeeperOptions, 'sessionTimeoutMs'> & { readonly sessionTimeoutMs: number };

/**
 * The session is gone, or may be: every lock node of it is (or will soon be) deleted by the
 * server. Holders are told through their lost signal; waiters start again on a new session.
 * A transport error like the client's own, so LockService wraps it in LockBackendError.
 */
export class ZooKeeperSessionLostError extends Error {
  override readonly name = 'ZooKeeperSessionLostError';
}

/**
 * One ZooKeeper session and its client. It never outlives its first connection's session: when
 * the server says it expired, or when nothing was heard from the server for as long as the
 * server may take to expire it, the session is declared dead at once (every pending call is
 * rejected, every listener told) and the client closed. Locks are never carried over to a new
 * session: the backend opens a fresh one for later acquisitions.
 */
export class ZooKeeperSession {
  /** Resolves on the first connection; rejects if the session dies first. */
  readonly connected: Promise<void>;
  private readonly acl: ZkAcl[];
  private readonly client: ZkClient;
  /** Calls awaiting a reply, oldest first, with when each was sent. */
  private readonly pending = new Map<(reason: Error) => void, number>();
  private readonly death = new OneShot();
  private readonly watches = new NodeWatches();
  private negotiatedTimeoutMs: number;
  private disconnectionCount = 0;
  /**
   * When we sent the latest request the server answered (performance.now()). The server
   * touched the session after that, so it cannot expire it before `lastContactAt + timeoutMs`.
   */
  private lastContactAt = 0;
  /** When a reply last arrived: with replies owed and none since, the server is silent. */
  private lastHeardAt = 0;
  /** Since when no connection is up (the client connecting, or reconnecting); undefined while one is. */
  private downSince: number | undefined;
  /** What unreachableSince() said when the session died of silence or no connection; undefined otherwise. */
  private unreachableAtDeath: number | undefined;
  private heartbeatInFlight = false;
  /** On the process's deadline scheduler, which never runs it before it is due. */
  private livenessTimer?: Deadline;
  private heartbeatTimer?: NodeJS.Timeout;
  private connectTimer?: NodeJS.Timeout;
  private sessionId = '(connecting)';

  /**
   * `connectTimeoutMs`: a session not established by then is declared dead (node-zookeeper-client
   * has no handshake timeout). `downSince`: since when the server has been unreachable, carried
   * over from the session this one replaces.
   */
  constructor(
    private readonly zk: ZkModule,
    options: ZooKeeperSessionOptions,
    connectTimeoutMs: number,
    downSince = performance.now(),
  ) {
    this.negotiatedTimeoutMs = options.sessionTimeoutMs;
    this.downSince = downSince;
    this.acl = options.acl.map((entry) => new zk.ACL(permissionMask(entry.permissions), new zk.Id(entry.scheme, entry.id)));
    // spinDelay: pause between rounds over the servers when none answers. The default (1 s) would
    // add up to a second to every reconnection; 100 ms still keeps a dead ensemble from being hammered.
    this.client = zk.createClient(options.connectionString, { sessionTimeout: options.sessionTimeoutMs, spinDelay: 100, retries: 0 });
    for (const { credentials } of options.auth) this.client.addAuthInfo('digest', Buffer.from(credentials));
    this.connected = new Promise<void>((resolve, reject) => {
      this.client.on('connected', () => {
        if (this.death.reason) return;
        this.downSince = undefined;
        this.lastHeardAt = performance.now();
        if (this.connectTimer) this.onFirstConnect();
        resolve();
        this.heartbeat();
      });
      this.onDeath(reject);
    });
    this.connected.catch(() => undefined);
    this.client.on('disconnected', () => {
      this.disconnectionCount++;
      this.downSince ??= performance.now();
    });
    this.client.on('expired', () => this.kill(new ZooKeeperSessionLostError(`ZooKeeper session ${this.sessionId} expired.`)));
    this.client.on('authenticationFailed', () =>
      this.kill(new LockBackendError('zookeeper', 'authenticate', new Error('the server refused the digest credentials (backend.auth)'))),
    );
    this.connectTimer = setTimeout(
      () =>
        this.kill(
          new ZooKeeperSessionLostError(`Could not connect to ZooKeeper at ${options.address} within ${connectTimeoutMs} ms.`),
          true,
        ),
      connectTimeoutMs,
    );
    this.connectTimer.unref();
    this.client.connect();
  }

  get alive(): boolean {
    return this.death.reason === undefined;
  }

  /** A connection is up (it may still be silent: see unreachableSince). */
  get isConnected(): boolean {
    return this.alive && this.downSince === undefined;
  }

  /**
   * Since when (performance.now()) the server cannot be reached through this session: no
   * connection up, or replies owed and nothing heard since; undefined while it can. A dead
   * session keeps what it said when it died of that, so its successor can carry it on.
   */
  unreachableSince(): number | undefined {
    if (!this.alive) return this.unreachableAtDeath;
    if (this.downSince !== undefined) return this.downSince;
    for (const sentAt of this.pending.values()) return Math.max(sentAt, this.lastHeardAt);
    return undefined;
  }

  /** When the latest request the server answered was sent: the session was alive on the server after it. */
  get lastContact(): number {
    return this.lastContactAt;
  }

  /** The session timeout the server granted (the one asked for until the first connection). */
  get timeoutMs(): number {
    return this.negotiatedTimeoutMs;
  }

  /**
   * How many times the connection dropped so far. Watch events come in zxid order on one
   * connection; after a reconnection the server replays what changed meanwhile in no such order.
   */
  get disconnections(): number {
    return this.disconnectionCount;
  }

  /** Calls `listener` once when the session dies (at once if it already has); returns an unsubscribe. */
  onDeath(listener: (reason: Error) => void): () => void {
    return this.death.listen(listener);
  }

  /** A persistent node (the root's segments, a lock name's parent) with the configured ACL. */
  createPersistent(path: string): Promise<string> {
    return this.call(path, (done) => this.client.create(path, null, this.acl, this.zk.CreateMode.PERSISTENT, done));
  }

  /** An ephemeral node of this session with the configured ACL: it goes when the session does. */
  createEphemeral(path: string, data: Buffer): Promise<string> {
    return this.call(path, (done) => this.client.create(path, data, this.acl, this.zk.CreateMode.EPHEMERAL, done));
  }

  /** The session id as the server gave it, hex (a node's ephemeralOwner in the same form); '(connecting)' before. */
  get id(): string {
    return this.sessionId;
  }

  /**
   * Creates an ephemeral sequential node and touches its parent in one transaction: both get
   * the transaction's zxid, so the parent's new mzxid is the node's czxid, without a second
   * round trip to read it; and the parent's numChildren right after says whether we are alone.
   */
  createWithZxid(parent: string, nodePrefix: string, data: Buffer): Promise<{ path: string; czxid: Buffer; siblings: number }> {
    return this.call(parent, (done) =>
      this.client
        .transaction()
        .create(`${parent}/${nodePrefix}`, data, this.acl, this.zk.CreateMode.EPHEMERAL_SEQUENTIAL)
        .setData(parent, null, -1)
        .commit((error, results) => {
          if (error) return done(error);
          const parentStat = results[1].stat!;
          done(null, { path: results[0].path!, czxid: parentStat.mzxid, siblings: parentStat.numChildren - 1 });
        }),
    );
  }

  remove(path: string): Promise<void> {
    return this.call(path, (done) => this.client.remove(path, -1, done));
  }

  /** A persistent node with `data` (a lock-delay record). */
  createRecord(path: string, data: Buffer): Promise<string> {
    return this.call(path, (done) => this.client.create(path, data, this.acl, this.zk.CreateMode.PERSISTENT, done));
  }

  /** Sets the node's data if its version is `version` (-1: any); resolves with its new stat. */
  setData(path: string, data: Buffer, version: number): Promise<ZkStat> {
    return this.call(path, (done) => this.client.setData(path, data, version, done));
  }

  /** Deletes `record` and `node` in one transaction, only while `node` exists: nothing when it is gone. */
  removeWithRecord(node: string, record: string): Promise<void> {
    return this.call(node, (done) =>
      this.client
        .transaction()
        .check(node, -1)
        .remove(record, -1)
        .remove(node, -1)
        .commit((error) => done(error)),
    );
  }

  /** The node's stat, or null when it does not exist. */
  exists(path: string): Promise<ZkStat | null> {
    return this.call(path, (done) => this.client.exists(path, undefined, done));
  }

  /** The node's data and stat, or null when it does not exist; leaves no watch. */
  read(path: string): Promise<{ data: Buffer; stat: ZkStat } | null> {
    return this.call<{ data: Buffer; stat: ZkStat } | null>(path, (done) =>
      this.client.getData(path, undefined, (error, data, stat) => (zkCode(error) === ZkCode.NO_NODE ? done(null, null) : done(error, { data, stat }))),
    );
  }

  /**
   * Leaves a watch on a node: `listener` is called once, on its next change. `set` resolves true
   * when the watch is in place, false when the node does not exist: a getData, unlike an exists,
   * leaves no watch on a missing node (one that would linger until someone created it).
   * `cancel` stops the listener; the client's own function for the path is shared (NodeWatches).
   */
  watch(path: string, listener: ZkWatcher): { set: Promise<boolean>; cancel: () => void } {
    const { watcher, remove } = this.watches.add(path, listener);
    const set = this.call<void>(path, (done) => this.client.getData(path, watcher, (error) => done(error))).then(
      () => true,
      (error: unknown) => {
        remove();
        if (zkCode(error) !== ZkCode.NO_NODE) throw error;
        this.watches.forget(path);
        return false;
      },
    );
    return { set, cancel: remove };
  }

  /** A wait of ours is listening for a change of `path`. */
  isWatched(path: string): boolean {
    return this.watches.isWatched(path);
  }

  getChildren(path: string): Promise<string[]> {
    return this.call(path, (done) => this.client.getChildren(path, done));
  }

  /** This session owns `stat`'s ephemeral node. */
  owns(stat: ZkStat): boolean {
    return stat.ephemeralOwner.toString('hex') === this.sessionId;
  }

  /**
   * Declares the session dead (idempotent): rejects every pending call, tells every listener,
   * closes the client. `unreachable`: it died because the server could not be reached.
   */
  kill(reason: Error, unreachable = false): void {
    if (this.death.reason) return;
    if (unreachable) this.unreachableAtDeath = this.unreachableSince() ?? performance.now();
    deadlines.cancel(this.livenessTimer);
    clearInterval(this.heartbeatTimer);
    clearTimeout(this.connectTimer);
    for (const fail of this.pending.keys()) fail(reason);
    this.pending.clear();
    this.death.happen(reason);
    closeClient(this.client);
  }

  /** Ends the session at the server, which deletes its ephemeral nodes at once. */
  async close(): Promise<void> {
    if (!this.alive) return;
    // Never connected: the server holds nothing of ours, and there is no close to wait for.
    if (this.connectTimer) return this.kill(new DistributedLockError('The ZooKeeper lock backend was closed.'));
    const closed = new Promise<void>((resolve) => {
      this.client.on('disconnected', resolve);
      setTimeout(resolve, 1_000).unref();
    });
    this.kill(new DistributedLockError('The ZooKeeper lock backend was closed.'));
    await closed;
  }

  /** `path`: the node the call is about, named when the server refuses it (NO_AUTH). */
  private call<T>(path: string, start: (done: (error: ZkError | null, value?: T) => void) => void): Promise<T> {
    if (this.death.reason) return Promise.reject(this.death.reason);
    const sentAt = performance.now();
    return new Promise<T>((resolve, reject) => {
      this.pending.set(reject, sentAt);
      start((error, value) => {
        if (!this.pending.delete(reject)) return;
        const code = zkCode(error);
        if (code !== ZkCode.CONNECTION_LOSS && code !== ZkCode.SESSION_EXPIRED) {
          this.lastContactAt = Math.max(this.lastContactAt, sentAt);
          this.lastHeardAt = performance.now();
        }
        if (code === ZkCode.NO_AUTH) reject(notAuthorized(error!, path));
        else if (error) reject(error);
        else resolve(value as T);
      });
    });
  }

  private onFirstConnect(): void {
    clearTimeout(this.connectTimer);
    this.connectTimer = undefined;
    this.negotiatedTimeoutMs = this.client.getSessionTimeout();
    this.sessionId = this.client.getSessionId().toString('hex');
    // The server created the session just before this reply; nothing is held on it yet.
    this.lastContactAt = this.lastHeardAt = performance.now();
    this.heartbeatTimer = setInterval(() => this.heartbeat(), this.negotiatedTimeoutMs / HEARTBEATS_PER_TIMEOUT);
    this.heartbeatTimer.unref();
    this.armLiveness();
  }

  /**
   * node-zookeeper-client pings only when its socket is idle and never notices a server that
   * stopped answering (no read timeout): our own cheap read, when nothing else was answered
   * lately, keeps `lastContactAt` honest.
   */
  private heartbeat(): void {
    if (this.heartbeatInFlight || !this.alive || performance.now() - this.lastContactAt < this.negotiatedTimeoutMs / HEARTBEATS_PER_TIMEOUT) return;
    this.heartbeatInFlight = true;
    this.exists('/')
      .catch(() => undefined)
      .finally(() => (this.heartbeatInFlight = false));
  }

  /** Fires when the server may have expired the session (less the lease drift allowance), unless heard from since. */
  private armLiveness(): void {
    this.livenessTimer = deadlines.add(this.livenessDeadline(), () => {
      // Timers run before sockets are read: after a stall of our own event loop, the replies
      // that came in meanwhile are still unread. Read them (setImmediate runs after the poll
      // phase) before judging, or a stall would pass for a silent server.
      if (this.overdue()) setImmediate(() => this.judgeLiveness());
      else this.judgeLiveness();
    });
  }

  private judgeLiveness(): void {
    if (!this.alive) return;
    if (!this.overdue()) return this.armLiveness();
    const silentMs = Math.round(performance.now() - this.lastContactAt);
    this.kill(
      new ZooKeeperSessionLostError(
        `No reply from ZooKeeper for ${silentMs} ms on session ${this.sessionId} (timeout ${this.negotiatedTimeoutMs} ms): it may have expired.`,
      ),
      true,
    );
  }

  private livenessDeadline(): number {
    return this.lastContactAt + this.negotiatedTimeoutMs - driftAllowanceMs(this.negotiatedTimeoutMs);
  }

  private overdue(): boolean {
    return performance.now() >= this.livenessDeadline();
  }
}

/**
 * The server's NO_AUTH, which names neither the node nor what to change. ZooKeeper accepts any
 * digest credentials (a wrong password is just another identity), so a wrong password shows up
 * here, at the first node whose ACL does not grant it. The code stays: callers still look at it.
 */
function notAuthorized(error: ZkError, path: string): ZkError {
  const message =
    `not authorized (NO_AUTH) for ${path}: its ACL (its parent's, for a create) does not grant this session's credentials what the lock needs. ` +
    'Check backend.auth (user:password) against the ACL the nodes were created with (backend.acl, or an operator\'s setAcl).';
  return Object.assign(new Error(message, { cause: error }), { code: error.code });
}
