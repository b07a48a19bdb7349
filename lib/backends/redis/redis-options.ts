import { LockConfigError } from '../../errors';

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
  /** `redis://[user:password@]host:port[/db]` or `rediss://` for TLS. The backend opens and closes its connections. */
  url?: string;
  /**
   * An existing ioredis `Redis` or `Cluster`. Never closed and never changed by the library (no
   * `defineCommand`); the backend subscribes on `client.duplicate()`, which it does close.
   */
  client?: RedisClientLike;
  /**
   * ioredis `RedisOptions` (host, port, password, username for ACLs, tls, sentinels + name for
   * Sentinel, ...), alone or merged over `url`. For Redis Cluster pass a `Cluster` as `client`.
   */
  options?: Record<string, unknown>;
}

const ALLOWED_FIELDS = new Set(['type', 'url', 'client', 'options']);

/** Checks the options before any connection is made; the error names the option to change. */
export function validateRedisOptions(options: RedisBackendOptions): void {
  for (const field of Object.keys(options)) {
    if (!ALLOWED_FIELDS.has(field)) {
      throw new LockConfigError(`backend.${field}`, "is not a redis backend option; use url, client or options.");
    }
  }
  const { url, client, options: clientOptions } = options;
  if (url === undefined && client === undefined && clientOptions === undefined) {
    throw new LockConfigError('backend.url', "the redis backend needs one of url, client or options, e.g. { type: 'redis', url: 'redis://127.0.0.1:6379' }.");
  }
  if (client !== undefined) {
    if (url !== undefined || clientOptions !== undefined) {
      throw new LockConfigError('backend.client', 'give either client or url/options, not both: a supplied client is used as it is.');
    }
    const candidate = client as unknown as Record<string, unknown> | null;
    if (typeof candidate !== 'object' || candidate === null || !['evalsha', 'eval', 'duplicate'].every((m) => typeof candidate[m] === 'function')) {
      throw new LockConfigError('backend.client', 'must be an ioredis Redis or Cluster instance.');
    }
  }
  if (url !== undefined && (typeof url !== 'string' || !/^rediss?:\/\/./.test(url))) {
    throw new LockConfigError('backend.url', `must be a redis:// or rediss:// URL, got ${JSON.stringify(url)}.`);
  }
  if (clientOptions !== undefined && (typeof clientOptions !== 'object' || clientOptions === null || Array.isArray(clientOptions))) {
    throw new LockConfigError('backend.options', 'must be an ioredis options object.');
  }
}
