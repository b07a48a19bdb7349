/**
 * The part of `node-zookeeper-client` this backend uses, typed here so that no published .d.ts
 * imports the optional package. Only the shapes, never the values: the module is loaded at
 * runtime through loadPeer.
 */
export interface ZkStat {
  /** 8-byte big-endian zxid of the create. */
  czxid: Buffer;
  mzxid: Buffer;
  /** 8-byte big-endian ms since the epoch, on the leader's clock when the last write to the node was made. */
  mtime: Buffer;
  version: number;
  ephemeralOwner: Buffer;
  numChildren: number;
}

export interface ZkError extends Error {
  code: number;
}

export interface ZkEvent {
  getType(): number;
}

export type ZkWatcher = (event: ZkEvent) => void;

export interface ZkAcl {
  readonly permission: number;
}

export interface ZkTransaction {
  create(path: string, data: Buffer | null, acls: ZkAcl[], mode: number): ZkTransaction;
  setData(path: string, data: Buffer | null, version: number): ZkTransaction;
  check(path: string, version: number): ZkTransaction;
  remove(path: string, version: number): ZkTransaction;
  commit(callback: (error: ZkError | null, results: { type: number; path?: string; stat?: ZkStat }[]) => void): void;
}

export interface ZkClient {
  connect(): void;
  close(): void;
  on(event: 'connected' | 'disconnected' | 'expired' | 'authenticationFailed', listener: () => void): this;
  getSessionId(): Buffer;
  getSessionTimeout(): number;
  addAuthInfo(scheme: string, auth: Buffer): void;
  create(path: string, data: Buffer | null, acls: ZkAcl[], mode: number, callback: (error: ZkError | null, path: string) => void): void;
  remove(path: string, version: number, callback: (error: ZkError | null) => void): void;
  exists(path: string, watcher: ZkWatcher | undefined, callback: (error: ZkError | null, stat: ZkStat | null) => void): void;
  getData(path: string, watcher: ZkWatcher | undefined, callback: (error: ZkError | null, data: Buffer, stat: ZkStat) => void): void;
  setData(path: string, data: Buffer | null, version: number, callback: (error: ZkError | null, stat: ZkStat) => void): void;
  getChildren(path: string, callback: (error: ZkError | null, children: string[]) => void): void;
  transaction(): ZkTransaction;
}

export interface ZkModule {
  createClient(connectionString: string, options: { sessionTimeout: number; spinDelay: number; retries: number }): ZkClient;
  ACL: new (permission: number, id: unknown) => ZkAcl;
  Id: new (scheme: string, id: string) => unknown;
  CreateMode: { PERSISTENT: number; EPHEMERAL: number; EPHEMERAL_SEQUENTIAL: number };
}

/** ZooKeeper's error codes this backend reacts to (KeeperException.Code). */
export const ZkCode = {
  CONNECTION_LOSS: -4,
  NO_NODE: -101,
  NO_AUTH: -102,
  NODE_EXISTS: -110,
  NOT_EMPTY: -111,
  BAD_VERSION: -103,
  SESSION_EXPIRED: -112,
} as const;

/** Watcher event type: the watched node was deleted. */
export const NODE_DELETED = 2;

export function zkCode(error: unknown): number | undefined {
  const code = (error as { code?: unknown } | null)?.code;
  return typeof code === 'number' ? code : undefined;
}

/** A zxid as a bigint (a lock node's czxid is its batch's entry token): 8 bytes, big-endian, never negative in practice (epoch << 32 | counter). */
export function zxidOf(buffer: Buffer): bigint {
  return buffer.readBigInt64BE(0);
}

/** The parts of node-zookeeper-client's ConnectionManager that closeClient reaches into. */
interface ConnectionManagerInternals {
  state: number;
  socket?: { destroy(): void };
  onSocketData(buffer: Buffer): void;
  onSocketConnected(): void;
}

/** ConnectionManager.STATES. */
const MANAGER_STATE = { CONNECTING: 1, CONNECTED: 2, CONNECTED_READ_ONLY: 3, CLOSED: -2 } as const;

/**
 * Closes the client for good. node-zookeeper-client cannot finish a close while it is still
 * (re)connecting: it would keep a socket (and the process) alive, and a handshake answered after
 * the close is read as a reply, which throws out of its socket handler (an uncaught exception).
 * So a client not connected has its socket cut at once and anything it still hears ignored;
 * any socket is destroyed until the client reports itself closed. This reaches into the
 * client's ConnectionManager.
 */
export function closeClient(client: ZkClient): void {
  const manager = (client as unknown as { connectionManager?: ConnectionManagerInternals }).connectionManager;
  if (manager && manager.state === MANAGER_STATE.CONNECTING && manager.socket === undefined) {
    // The first connection attempt makes its socket on the next tick; a close before then
    // writes to no socket and throws. Close once the socket exists.
    setImmediate(() => closeClient(client));
    return;
  }
  const established = manager?.state === MANAGER_STATE.CONNECTED || manager?.state === MANAGER_STATE.CONNECTED_READ_ONLY;
  if (manager && !established) {
    // Sockets bind these when they are made: a reconnection already on its way gets them too.
    manager.onSocketData = () => undefined;
    manager.onSocketConnected = function (this: ConnectionManagerInternals) {
      this.socket?.destroy();
    };
  }
  client.close();
  if (manager && !established) manager.socket?.destroy();
  const timer = setInterval(() => {
    if (!manager || manager.state === MANAGER_STATE.CLOSED) return clearInterval(timer);
    manager.socket?.destroy();
  }, 500);
  timer.unref();
}
