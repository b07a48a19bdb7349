import { LockConfigError } from '../../errors';
import { allowOnlyFields, checkSuppliedClient } from '../option-checks';

/**
 * The few methods the backend calls on a user-supplied client, typed structurally so that the
 * published .d.ts never imports ioredis (an optional peer). An ioredis `Redis` or `Cluster` fits.
 */
export interface RedisClientLike {
  evalsha(...args: any[]): Promise<unknown>;
  eval(...args: any[]): Promise<unknown>;
  /** The backend subscribes on a duplicate, never on the user's connection. */
  duplicate(...args: any[]): unknown;
}

/**
 * `{ type: 'redis', url }`, `{ type: 'redis', client }`, `{ type: 'redis', options }` or
 * `{ type: 'redis', url, options }`. Give exactly one way to connect.
 */
export interface RedisBackendOptions {
  type: 'redis';
  /**
   * An address as ioredis takes it: `redis://[user:password@]host:port[/db]`, `rediss://` for
   * TLS, or `host:port` with no scheme. The backend opens and closes its connections.
   */
  url?: string;
  /**
   * An existing ioredis `Redis` or `Cluster`. Never closed and never changed by the library (no
   * `defineCommand`); the backend subscribes on `client.duplicate()`, which it does close.
   */
  client?: RedisClientLike;
  /**
   * ioredis `RedisOptions` (host, port, password, username for ACLs, tls, sentinels + name for
   * Sentinel, ...), alone or with `url` (ioredis takes from `options` what the URL leaves out).
   * For Redis Cluster pass a `Cluster` as `client`.
   * Unless set here, `connectTimeout` follows the module's serverTimeoutMs (every command is
   * bounded by it too),
   * `maxRetriesPerRequest` is 0 and reconnection attempts come at most about a second apart
   * (see docs/redis.md, "When the server is down").
   */
  options?: Record<string, unknown>;
  /**
   * How the lock is laid out in Redis. `'native'` (the default): this library's FIFO queue with
   * direct handoff, read locks and semaphores, keys under a `{name}` hash tag. `'plain'`: the
   * plain lock of the Redis documentation, the key `<keyPrefix><name>` itself taken with
   * `SET key value NX PX ttl` and released by compare-and-delete, so that other clients of that
   * lock (redis-py's `Lock`, go-redsync, Spring's RedisLockRegistry) and this library exclude
   * each other. Plain gives up FIFO and read locks/semaphores (docs/redis.md, "Protocol: plain").
   */
  protocol?: RedisProtocol;
  /**
   * Default `true`. A server restarted without its data (no persistence, or a flush) forgets
   * every lock while their holders still run: when a process that knew the server finds its
   * life marker gone, no lock name is granted there for the longest ttl that process knows of,
   * so every lease of the former life ends first (the "delayed restart" of the Redis docs, done
   * by the library; docs/redis.md, "A restart without the data"). `false` grants at once after
   * such a restart, and two processes may then hold one name until the old holder's renewal
   * fails. Not on Redis Cluster, whose scripts reach one slot only. The native protocol only.
   */
  restartProtection?: boolean;
}

/** See RedisBackendOptions.protocol. */
export type RedisProtocol = 'native' | 'plain';
const PROTOCOLS: readonly RedisProtocol[] = ['native', 'plain'];

const BUILD_FIELDS = ['url', 'options'] as const;

/** A scheme-less address ioredis accepts: `host`, `host:port`, `[ipv6]:port`, or a socket path. */
const SCHEMELESS_ADDRESS = /^(?:[\w.-]+|\[[\da-fA-F:.]+\])(?::\d{1,5})?(?:\/\d+)?$|^\/\S+$/;

/** Checks the options before any connection is made; the error names the option to change. */
export function validateRedisOptions(options: RedisBackendOptions): void {
  allowOnlyFields('redis', options, ['url', 'client', 'options', 'protocol', 'restartProtection']);
  const { url, client, options: clientOptions } = options;
  if (url === undefined && client === undefined && clientOptions === undefined) {
    throw new LockConfigError('backend.url', "the redis backend needs one of url, client or options, e.g. { type: 'redis', url: 'redis://127.0.0.1:6379' }.");
  }
  checkSuppliedClient(options as unknown as Record<string, unknown>, BUILD_FIELDS, ['evalsha', 'eval', 'duplicate'], 'an ioredis Redis or Cluster instance');
  if (url !== undefined && !isRedisAddress(url)) {
    throw new LockConfigError('backend.url', `must be a redis:// or rediss:// URL or a host:port address, got ${JSON.stringify(url)}.`);
  }
  if (clientOptions !== undefined && (typeof clientOptions !== 'object' || clientOptions === null || Array.isArray(clientOptions))) {
    throw new LockConfigError('backend.options', 'must be an ioredis options object.');
  }
  if (options.protocol !== undefined && !PROTOCOLS.includes(options.protocol)) {
    throw new LockConfigError('backend.protocol', `must be 'native' (the default) or 'plain', got ${JSON.stringify(options.protocol)}.`);
  }
  if (options.restartProtection !== undefined && typeof options.restartProtection !== 'boolean') {
    throw new LockConfigError('backend.restartProtection', `must be true (the default) or false, got ${JSON.stringify(options.restartProtection)}.`);
  }
}

function isRedisAddress(url: unknown): boolean {
  if (typeof url !== 'string') return false;
  if (/^rediss?:\/\/./i.test(url)) return true;
  // Another scheme (http://, unix://) is a mistake, not a host name.
  return !url.includes('://') && SCHEMELESS_ADDRESS.test(url);
}
