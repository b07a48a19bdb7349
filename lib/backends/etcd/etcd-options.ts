import { LockConfigError } from '../../errors';

/**
 * The parts of an `Etcd3` client the backend uses, typed structurally so that the published
 * .d.ts never imports etcd3 (an optional peer). An `Etcd3` instance fits.
 */
export interface Etcd3ClientLike {
  watch(): unknown;
  lease(ttlSeconds: number, options?: object): unknown;
  close(): void;
}

/**
 * `{ type: 'etcd', hosts }` (with `auth` and TLS `credentials` when the cluster needs them), or
 * `{ type: 'etcd', client }` to share an existing client.
 */
export interface EtcdBackendOptions {
  type: 'etcd';
  /** `http://host:port` or `https://host:port`, one or several members. Default 'http://127.0.0.1:2379'. */
  hosts?: string | string[];
  /** etcd user and password, passed to etcd3. Default: none. */
  auth?: { username: string; password: string };
  /** TLS material, passed to etcd3 (PEM buffers). Default: none (plain TCP). */
  credentials?: { rootCertificate: Buffer; privateKey?: Buffer; certChain?: Buffer };
  /** An existing `Etcd3` client. Never closed by the library; the backend only adds its own lease and watches. */
  client?: Etcd3ClientLike;
  /**
   * The session lease behind every lock of this process. Default 10000. Rounded up to whole
   * seconds (at least 1); the server may raise it to its minimum (1.5 election timeouts). A
   * crashed or paused process's locks are freed by etcd this long after its last keepalive;
   * a running process frees a lock itself when the lock's own `ttlMs` runs out.
   */
  sessionTtlMs?: number;
}

export const DEFAULT_ETCD_HOSTS = 'http://127.0.0.1:2379';
export const DEFAULT_SESSION_TTL_MS = 10_000;

const ALLOWED_FIELDS = new Set(['type', 'hosts', 'auth', 'credentials', 'client', 'sessionTtlMs']);

/** Checks the options before any connection is made; the error names the option to change. */
export function validateEtcdOptions(options: EtcdBackendOptions): void {
  for (const field of Object.keys(options)) {
    if (!ALLOWED_FIELDS.has(field)) {
      throw new LockConfigError(`backend.${field}`, 'is not an etcd backend option; use hosts, auth, credentials, client or sessionTtlMs.');
    }
  }
  const { hosts, auth, credentials, client, sessionTtlMs } = options;
  if (client !== undefined) {
    if (hosts !== undefined || auth !== undefined || credentials !== undefined) {
      throw new LockConfigError('backend.client', 'give either client or hosts/auth/credentials, not both: a supplied client is used as it is.');
    }
    const candidate = client as unknown as Record<string, unknown> | null;
    if (typeof candidate !== 'object' || candidate === null || !['watch', 'lease', 'close'].every((m) => typeof candidate[m] === 'function')) {
      throw new LockConfigError('backend.client', 'must be an etcd3 Etcd3 instance.');
    }
  }
  if (hosts !== undefined) {
    const list = Array.isArray(hosts) ? hosts : [hosts];
    if (list.length === 0 || !list.every((host) => typeof host === 'string' && /^https?:\/\/[^/\s]+\/?$/.test(host))) {
      throw new LockConfigError('backend.hosts', `must be one or more http(s)://host:port URLs, got ${JSON.stringify(hosts)}.`);
    }
  }
  if (auth !== undefined) {
    if (typeof auth !== 'object' || auth === null || typeof auth.username !== 'string' || auth.username === '' || typeof auth.password !== 'string') {
      throw new LockConfigError('backend.auth', 'must be { username, password } with a non-empty username.');
    }
  }
  if (credentials !== undefined) {
    const isBuffer = (value: unknown) => Buffer.isBuffer(value);
    if (
      typeof credentials !== 'object' ||
      credentials === null ||
      !isBuffer(credentials.rootCertificate) ||
      (credentials.privateKey !== undefined && !isBuffer(credentials.privateKey)) ||
      (credentials.certChain !== undefined && !isBuffer(credentials.certChain))
    ) {
      throw new LockConfigError('backend.credentials', 'must be { rootCertificate, privateKey?, certChain? } with PEM Buffers.');
    }
  }
  if (sessionTtlMs !== undefined && (typeof sessionTtlMs !== 'number' || !Number.isFinite(sessionTtlMs) || sessionTtlMs <= 0)) {
    throw new LockConfigError('backend.sessionTtlMs', `must be a finite number of milliseconds above 0, got ${String(sessionTtlMs)}.`);
  }
}

/** etcd leases are whole seconds: round up, so a session never lives shorter than asked. */
export function sessionTtlSeconds(sessionTtlMs: number = DEFAULT_SESSION_TTL_MS): number {
  return Math.max(1, Math.ceil(sessionTtlMs / 1000));
}
