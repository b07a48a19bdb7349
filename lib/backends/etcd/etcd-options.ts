import { LockConfigError } from '../../errors';
import { assertMilliseconds } from '../../option-checks';
import { allowOnlyFields, checkSuppliedClient } from '../option-checks';

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
  /**
   * One or several members, as etcd3 takes them: `host:port`, `http://host:port` or
   * `https://host:port` (TLS). Default '127.0.0.1:2379'.
   */
  hosts?: string | string[];
  /** etcd user and password, passed to etcd3. Default: none. */
  auth?: { username: string; password: string };
  /** TLS material, passed to etcd3 (PEM buffers). Default: none (plain TCP). */
  credentials?: { rootCertificate: Buffer; privateKey?: Buffer; certChain?: Buffer };
  /** An existing `Etcd3` client. Never closed by the library; the backend only adds its own lease and watches. */
  client?: Etcd3ClientLike;
  /**
   * The session lease behind every lock of this process: how long etcd keeps a crashed or
   * paused process's locks. Default: the module's `ttlMs`. Rounded up to whole seconds (see
   * sessionTtlSeconds); the server may raise it to its own minimum.
   */
  sessionTtlMs?: number;
  /**
   * How locks are taken: 'native' (the default) puts and watches this library's keys, in the
   * layout of Go's concurrency.Mutex; 'lock-api' asks etcd's own Lock service (`v3lockpb.Lock`,
   * as `etcdctl lock` and jetcd's LockClient do) and grants the exclusive lock only. Both
   * exclude each other and etcdctl on the same name. See docs/etcd.md, "Protocol: lock-api".
   */
  protocol?: EtcdProtocol;
}

/** See EtcdBackendOptions.protocol. */
export type EtcdProtocol = 'native' | 'lock-api';
const PROTOCOLS: readonly EtcdProtocol[] = ['native', 'lock-api'];

export const DEFAULT_ETCD_HOSTS = '127.0.0.1:2379';

const BUILD_FIELDS = ['hosts', 'auth', 'credentials'] as const;
const HOST = /^(?:https?:\/\/)?[^/\s:]+:\d{1,5}\/?$/;

/** Checks the options before any connection is made; the error names the option to change. */
export function validateEtcdOptions(options: EtcdBackendOptions): void {
  allowOnlyFields('etcd', options, [...BUILD_FIELDS, 'client', 'sessionTtlMs', 'protocol']);
  checkSuppliedClient(options as unknown as Record<string, unknown>, BUILD_FIELDS, ['watch', 'lease', 'close'], 'an etcd3 Etcd3 instance');
  const { hosts, auth, credentials, sessionTtlMs, protocol } = options;
  if (protocol !== undefined && !PROTOCOLS.includes(protocol)) {
    throw new LockConfigError('backend.protocol', `must be 'native' (the default) or 'lock-api', got ${JSON.stringify(protocol)}.`);
  }
  if (hosts !== undefined) {
    const list = Array.isArray(hosts) ? hosts : [hosts];
    if (list.length === 0 || !list.every((host) => typeof host === 'string' && HOST.test(host))) {
      throw new LockConfigError('backend.hosts', `must be one or more 'host:port' or 'http(s)://host:port' strings, got ${JSON.stringify(hosts)}.`);
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
  if (sessionTtlMs !== undefined) {
    assertMilliseconds('backend.sessionTtlMs', sessionTtlMs, (ms) => Number.isFinite(ms) && ms > 0, 'a finite number of milliseconds above 0');
  }
}

/** The hosts as errors show them: 'host:port', comma-separated (no credentials ever appear in them). */
export function etcdAddress(hosts: string | string[]): string {
  return (Array.isArray(hosts) ? hosts : [hosts]).map((host) => host.replace(/^https?:\/\//, '').replace(/\/$/, '')).join(',');
}

/**
 * etcd leases are whole seconds: round up, so a session never lives shorter than asked (at
 * least 1 s). The server raises a ttl below its minimum (1.5 election timeouts, rounded up:
 * 2 s with etcd's default 1 s election timeout) and the session follows what it granted.
 */
export function sessionTtlSeconds(sessionTtlMs: number): number {
  return Math.max(1, Math.ceil(sessionTtlMs / 1000));
}
