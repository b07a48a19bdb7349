import { LockConfigError } from '../../errors';
import { MAX_TIMER_MS } from '../../lock-defaults';
import { assertMilliseconds } from '../../option-checks';
import { allowOnlyFields } from '../option-checks';
import { invalidPathReason } from './zookeeper-paths';
import type { CuratorRecipe, NodeLayout, ZooKeeperProtocol } from './zookeeper-protocol';

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
  /**
   * `host[:port][,host[:port]...][/chroot]`, as node-zookeeper-client takes it (port 2181 when
   * omitted); hosts are names or IPv4 (no `[IPv6]` literal).
   */
  connectionString: string;
  /**
   * Session timeout asked of the server. Default: the module's `ttlMs`, so that a crashed
   * holder's lock is freed within it (a node lives as long as its session). The server clamps it
   * to its [minSessionTimeout, maxSessionTimeout] (default 2 to 20 ticks: 4 s to 40 s); the
   * backend uses the negotiated value and logs a warning when it is longer than asked.
   */
  sessionTimeoutMs?: number;
  /** Credentials added to every session before it connects. Default none. */
  auth?: { scheme: 'digest'; credentials: string }[];
  /** ACL of the nodes the backend creates. Default world:anyone with all permissions (ZooKeeper's OPEN_ACL_UNSAFE). */
  acl?: ZooKeeperAclEntry[];
  /** The node under which every lock name gets its parent node. Default '/distributed-lock'. */
  rootPath?: string;
  /**
   * The lock nodes' layout. 'native' (default): this backend's, with read locks and semaphores.
   * 'curator': Apache Curator's (`curatorRecipe`), so that Java services locking the same path
   * with Curator and this backend exclude each other; no semaphores.
   */
  protocol?: ZooKeeperProtocol;
  /**
   * With protocol 'curator': the recipe the Java side uses on the lock's path. Default
   * 'InterProcessMutex' (exclusive locks only); 'InterProcessReadWriteLock' adds mode 'read'.
   */
  curatorRecipe?: CuratorRecipe;
}

export interface ResolvedZooKeeperOptions extends NodeLayout {
  readonly connectionString: string;
  /** The servers as errors name them: 'host:port,host:port' (the chroot and nothing secret). */
  readonly address: string;
  /** Undefined: follow the module's ttlMs (see createZooKeeperBackend). */
  readonly sessionTimeoutMs: number | undefined;
  readonly auth: readonly { scheme: 'digest'; credentials: string }[];
  readonly acl: readonly ZooKeeperAclEntry[];
  readonly rootPath: string;
}

export const DEFAULT_ZOOKEEPER_ROOT_PATH = '/distributed-lock';
const DEFAULT_PORT = 2181;
const FIELDS = ['connectionString', 'sessionTimeoutMs', 'auth', 'acl', 'rootPath', 'protocol', 'curatorRecipe'];
const PROTOCOLS: readonly ZooKeeperProtocol[] = ['native', 'curator'];
const CURATOR_RECIPES: readonly CuratorRecipe[] = ['InterProcessMutex', 'InterProcessReadWriteLock'];
const OPEN_ACL: ZooKeeperAclEntry[] = [{ scheme: 'world', id: 'anyone', permissions: 'all' }];
const PERMISSIONS: readonly ZooKeeperPermission[] = ['read', 'write', 'create', 'delete', 'admin'];
const ACL_SCHEMES = ['world', 'auth', 'digest', 'ip'];
/**
 * One server of the connection string. node-zookeeper-client splits each at every ':' ('[::1]:2181'
 * gives host '[' and no port), so an IPv6 literal cannot be given; a host name that resolves to it can.
 */
const SERVER = /^([A-Za-z0-9._-]+)(?::(\d{1,5}))?$/;

/** Checks everything a typo could break, before the client library is even loaded. */
export function resolveZooKeeperOptions(options: ZooKeeperBackendOptions): ResolvedZooKeeperOptions {
  allowOnlyFields('zookeeper', options, FIELDS);
  const { connectionString, sessionTimeoutMs, auth = [], acl = OPEN_ACL } = options;
  const rootPath = options.rootPath ?? DEFAULT_ZOOKEEPER_ROOT_PATH;
  const address = serversOf(connectionString);
  if (sessionTimeoutMs !== undefined) {
    assertMilliseconds(
      'backend.sessionTimeoutMs',
      sessionTimeoutMs,
      (ms) => Number.isInteger(ms) && ms >= 100 && ms <= MAX_TIMER_MS,
      'a whole number of milliseconds, at least 100',
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
  return { connectionString, address, sessionTimeoutMs, auth, acl, rootPath, ...layoutOf(options) };
}

function layoutOf({ protocol = 'native', curatorRecipe }: ZooKeeperBackendOptions): NodeLayout {
  if (!PROTOCOLS.includes(protocol)) {
    throw new LockConfigError('backend.protocol', `must be 'native' or 'curator', got ${JSON.stringify(protocol)}.`);
  }
  if (curatorRecipe !== undefined && !CURATOR_RECIPES.includes(curatorRecipe)) {
    throw new LockConfigError('backend.curatorRecipe', `must be 'InterProcessMutex' or 'InterProcessReadWriteLock', got ${JSON.stringify(curatorRecipe)}.`);
  }
  if (protocol === 'native') {
    if (curatorRecipe !== undefined) throw new LockConfigError('backend.curatorRecipe', "applies to protocol 'curator' only: set backend.protocol: 'curator', or remove it.");
    return { protocol };
  }
  return { protocol, curatorRecipe: curatorRecipe ?? 'InterProcessMutex' };
}

/**
 * The connection string's servers as 'host:port,...', checked as node-zookeeper-client reads it:
 * the servers up to the first '/', empty entries skipped, the port 2181 when omitted; the rest
 * is the chroot ('/' alone or at the end: none).
 */
function serversOf(connectionString: unknown): string {
  const expected = `must be "host[:port][,host[:port]...][/chroot]", e.g. "127.0.0.1:2181", got ${JSON.stringify(connectionString)}.`;
  if (typeof connectionString !== 'string') throw new LockConfigError('backend.connectionString', expected);
  const slash = connectionString.indexOf('/');
  const servers = (slash === -1 ? connectionString : connectionString.slice(0, slash)).split(',').filter((entry) => entry !== '');
  if (servers.some((server) => server.includes('['))) {
    throw new LockConfigError(
      'backend.connectionString',
      `node-zookeeper-client cannot connect to an IPv6 literal (it splits "host:port" at every ':'): ` +
        `use a host name that resolves to the address, got ${JSON.stringify(connectionString)}.`,
    );
  }
  const parsed = servers.map((server) => SERVER.exec(server));
  if (parsed.length === 0 || parsed.some((match) => !match || (match[2] !== undefined && !(Number(match[2]) >= 1 && Number(match[2]) <= 65_535)))) {
    throw new LockConfigError('backend.connectionString', expected);
  }
  const chroot = slash === -1 || slash === connectionString.length - 1 ? undefined : connectionString.slice(slash);
  const chrootProblem = chroot === undefined ? undefined : invalidPathReason(chroot);
  if (chrootProblem) throw new LockConfigError('backend.connectionString', `the chroot ${JSON.stringify(chroot)} ${chrootProblem}.`);
  return parsed.map((match) => `${match![1]}:${match![2] ?? DEFAULT_PORT}`).join(',');
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
