import { LockConfigError } from '../../errors';
import { invalidPathReason } from './zookeeper-paths';

/** A ZooKeeper permission, as in `setAcl`: r, w, c, d, a. */
export type ZooKeeperPermission = 'read' | 'write' | 'create' | 'delete' | 'admin';

/** One ACL entry for the nodes this backend creates (the root, one parent per lock name, the lock nodes). */
export interface ZooKeeperAclEntry {
  /** 'world' (id 'anyone'), 'auth' (id '': whoever created the node), 'digest' (id 'user:base64(sha1(user:password))'), 'ip'. */
  scheme: 'world' | 'auth' | 'digest' | 'ip';
  id: string;
  /** 'all' or a list. */
  permissions: 'all' | ZooKeeperPermission[];
}

export interface ZooKeeperBackendOptions {
  type: 'zookeeper';
  /** `host:port[,host:port...][/chroot]`, as every ZooKeeper client takes it; hosts are names or IPv4 (no `[IPv6]` literal). */
  connectionString: string;
  /**
   * Session timeout asked of the server, default 10000. The server clamps it to its
   * [minSessionTimeout, maxSessionTimeout] (default 2 to 20 ticks: 4 s to 40 s); the backend
   * uses the negotiated value. A killed holder's lock is freed this long after it died.
   */
  sessionTimeoutMs?: number;
  /** Credentials added to every session before it connects. Default none. */
  auth?: { scheme: 'digest'; credentials: string }[];
  /** ACL of the nodes the backend creates. Default world:anyone with all permissions (ZooKeeper's OPEN_ACL_UNSAFE). */
  acl?: ZooKeeperAclEntry[];
  /** The node under which every lock name gets its parent node. Default '/distributed-lock'. */
  rootPath?: string;
}

export interface ResolvedZooKeeperOptions {
  readonly connectionString: string;
  readonly sessionTimeoutMs: number;
  readonly auth: readonly { scheme: 'digest'; credentials: string }[];
  readonly acl: readonly ZooKeeperAclEntry[];
  readonly rootPath: string;
}

export const DEFAULT_ZOOKEEPER_SESSION_TIMEOUT_MS = 10_000;
export const DEFAULT_ZOOKEEPER_ROOT_PATH = '/distributed-lock';
const OPEN_ACL: ZooKeeperAclEntry[] = [{ scheme: 'world', id: 'anyone', permissions: 'all' }];
const PERMISSIONS: readonly ZooKeeperPermission[] = ['read', 'write', 'create', 'delete', 'admin'];
const ACL_SCHEMES = ['world', 'auth', 'digest', 'ip'];
/**
 * host:port pairs, then an optional chroot; hosts are names or IPv4 addresses. node-zookeeper-client
 * splits each pair at every ':' ('[::1]:2181' gives host '[' and no port), so an IPv6 literal
 * cannot be given; a host name that resolves to it can.
 */
const CONNECTION_STRING = /^[A-Za-z0-9._-]+:\d{1,5}(?:,[A-Za-z0-9._-]+:\d{1,5})*(\/.*)?$/;

/** Checks everything a typo could break, before the client library is even loaded. */
export function resolveZooKeeperOptions(options: ZooKeeperBackendOptions): ResolvedZooKeeperOptions {
  const { connectionString, sessionTimeoutMs = DEFAULT_ZOOKEEPER_SESSION_TIMEOUT_MS, auth = [], acl = OPEN_ACL } = options;
  const rootPath = options.rootPath ?? DEFAULT_ZOOKEEPER_ROOT_PATH;
  if (typeof connectionString === 'string' && connectionString.split('/', 1)[0].includes('[')) {
    throw new LockConfigError(
      'backend.connectionString',
      `node-zookeeper-client cannot connect to an IPv6 literal (it splits "host:port" at every ':'): ` +
        `use a host name that resolves to the address, got ${JSON.stringify(connectionString)}.`,
    );
  }
  const connection = typeof connectionString === 'string' ? CONNECTION_STRING.exec(connectionString) : null;
  if (!connection) {
    throw new LockConfigError(
      'backend.connectionString',
      `must be "host:port[,host:port...][/chroot]", e.g. "127.0.0.1:2181", got ${JSON.stringify(connectionString)}.`,
    );
  }
  const chrootProblem = connection[1] && connection[1] !== '/' ? invalidPathReason(connection[1]) : undefined;
  if (chrootProblem) throw new LockConfigError('backend.connectionString', `the chroot ${JSON.stringify(connection[1])} ${chrootProblem}.`);
  if (!Number.isInteger(sessionTimeoutMs) || sessionTimeoutMs < 100 || sessionTimeoutMs > 2 ** 31 - 1) {
    throw new LockConfigError(
      'backend.sessionTimeoutMs',
      `must be a whole number of milliseconds, at least 100, got ${String(sessionTimeoutMs)}.`,
    );
  }
  if (!Array.isArray(auth) || !auth.every((entry) => entry?.scheme === 'digest' && /^[^:]+:.*$/s.test(String(entry.credentials)))) {
    throw new LockConfigError('backend.auth', "must be a list of { scheme: 'digest', credentials: 'user:password' }.");
  }
  if (!Array.isArray(acl) || acl.length === 0 || !acl.every(isAclEntry)) {
    throw new LockConfigError(
      'backend.acl',
      `must be a non-empty list of { scheme: ${ACL_SCHEMES.map((s) => `'${s}'`).join(' | ')}, id: string, ` +
        `permissions: 'all' | (${PERMISSIONS.map((p) => `'${p}'`).join(' | ')})[] }.`,
    );
  }
  if (acl.some((entry) => entry.scheme === 'auth') && auth.length === 0) {
    throw new LockConfigError('backend.acl', "an 'auth' scheme entry grants the session's own credentials: set backend.auth too.");
  }
  const rootProblem =
    typeof rootPath !== 'string' ? 'must be a string' : rootPath === '/' ? 'must not be the root itself' : invalidPathReason(rootPath);
  if (rootProblem) throw new LockConfigError('backend.rootPath', `${JSON.stringify(rootPath)} ${rootProblem}, e.g. '/distributed-lock'.`);
  if (rootPath === '/zookeeper' || rootPath.startsWith('/zookeeper/')) {
    throw new LockConfigError('backend.rootPath', '/zookeeper is reserved by the server.');
  }
  return { connectionString, sessionTimeoutMs, auth, acl, rootPath };
}

function isAclEntry(entry: ZooKeeperAclEntry): boolean {
  return (
    typeof entry === 'object' &&
    entry !== null &&
    ACL_SCHEMES.includes(entry.scheme) &&
    typeof entry.id === 'string' &&
    (entry.permissions === 'all' ||
      (Array.isArray(entry.permissions) && entry.permissions.length > 0 && entry.permissions.every((p) => PERMISSIONS.includes(p))))
  );
}

/** The permission bit mask ZooKeeper expects (READ 1, WRITE 2, CREATE 4, DELETE 8, ADMIN 16). */
export function permissionMask(permissions: ZooKeeperAclEntry['permissions']): number {
  if (permissions === 'all') return 31;
  return permissions.reduce((mask, permission) => mask | (1 << PERMISSIONS.indexOf(permission)), 0);
}
