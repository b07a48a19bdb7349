import { LockConfigError } from '../../errors';
import { assertMilliseconds } from '../../option-checks';
import { allowOnlyFields } from '../option-checks';
import type { RedisClientLike } from '../redis/redis-options';

/**
 * `{ type: 'redlock', urls: [...] }` or `{ type: 'redlock', clients: [...] }`: one lock over N
 * independent Redis masters (no replication between them), held while a majority granted it.
 * See docs/redlock.md for what that guarantees and what it does not.
 */
export interface RedlockBackendOptions {
  type: 'redlock';
  /**
   * The masters, as ioredis takes an address (`redis://[user:password@]host:port[/db]`,
   * `rediss://` for TLS, or `host:port`). At least 3; an even count works (a majority of N is
   * N/2 + 1) but tolerates no more failures than N - 1 masters would, so prefer an odd count.
   */
  urls?: string[];
  /**
   * Existing ioredis `Redis` clients, one per master. Never closed and never changed by the
   * library; the backend subscribes on `client.duplicate()` of each, which it does close.
   */
  clients?: RedisClientLike[];
  /** ioredis `RedisOptions` for every master built from `urls` (password, tls, ...). */
  options?: Record<string, unknown>;
  /**
   * How long one master may take to answer one request before it counts as not granting (its
   * answer may still come; it is then released). Much smaller than the ttl, so a dead master
   * costs an attempt little of its validity. Default 200.
   */
  requestTimeoutMs?: number;
  /**
   * Clock drift allowed between this process and the masters, as a fraction of the ttl: a lock
   * is held only while `ttl - elapsed - (ttl * driftFactor + 2 ms) > 0`, and its local deadline
   * is that much before the masters' expiry. Default 0.01 (Redlock's own figure).
   */
  driftFactor?: number;
  /**
   * A waiter whose attempt split the vote (it got some masters, not a majority) tries again
   * after a random delay up to this long, so that two waiters do not split again. Default 10.
   */
  retryJitterMs?: number;
  /**
   * Default `true`. A master restarted without its data forgets its votes while their holders
   * still run, and could make a second majority with the others' free votes: when a process that
   * knew the master finds its life marker gone, the master votes for nobody for the longest ttl
   * that process knows of (docs/redlock.md, "A master restarted without its data"). `false`
   * counts such a master's votes at once, which Redlock's safety argument does not allow.
   */
  restartProtection?: boolean;
}

export const DEFAULT_REQUEST_TIMEOUT_MS = 200;
export const DEFAULT_DRIFT_FACTOR = 0.01;
export const DEFAULT_RETRY_JITTER_MS = 10;
/** Fewer masters cannot outvote one that is lost or wrong. */
export const MIN_MASTERS = 3;

const URL = /^rediss?:\/\/.+|^(?:[\w.-]+|\[[\da-fA-F:.]+\]):\d{1,5}$/i;

/** Checks the options before any connection is made; the error names the option to change. */
export function validateRedlockOptions(options: RedlockBackendOptions): void {
  allowOnlyFields('redlock', options, ['urls', 'clients', 'options', 'requestTimeoutMs', 'driftFactor', 'retryJitterMs', 'restartProtection']);
  const { urls, clients, options: clientOptions, requestTimeoutMs, driftFactor, retryJitterMs } = options;
  if ((urls === undefined) === (clients === undefined)) {
    throw new LockConfigError('backend.urls', `give either urls or clients (one per master, at least ${MIN_MASTERS}), e.g. { type: 'redlock', urls: ['redis://a:6379', 'redis://b:6379', 'redis://c:6379'] }.`);
  }
  if (urls !== undefined) {
    if (!Array.isArray(urls) || !urls.every((url) => typeof url === 'string' && URL.test(url))) {
      throw new LockConfigError('backend.urls', `must be an array of redis:// or rediss:// URLs or host:port addresses, got ${JSON.stringify(urls)}.`);
    }
    assertMasterCount('backend.urls', urls.length);
    if (new Set(urls).size !== urls.length) throw new LockConfigError('backend.urls', 'names a master twice: each master must be counted once towards the majority.');
  }
  if (clients !== undefined) {
    if (!Array.isArray(clients)) throw new LockConfigError('backend.clients', 'must be an array of ioredis Redis instances, one per master.');
    assertMasterCount('backend.clients', clients.length);
    const methods = ['evalsha', 'eval', 'duplicate'];
    if (!clients.every((client) => typeof client === 'object' && client !== null && methods.every((method) => typeof (client as unknown as Record<string, unknown>)[method] === 'function'))) {
      throw new LockConfigError('backend.clients', 'must be ioredis Redis instances (one per master).');
    }
    if (new Set(clients).size !== clients.length) throw new LockConfigError('backend.clients', 'holds the same client twice: each master must be counted once towards the majority.');
    if (clientOptions !== undefined) throw new LockConfigError('backend.options', 'applies to masters built from urls; supplied clients are used as they are.');
  }
  if (clientOptions !== undefined && (typeof clientOptions !== 'object' || clientOptions === null || Array.isArray(clientOptions))) {
    throw new LockConfigError('backend.options', 'must be an ioredis options object.');
  }
  if (requestTimeoutMs !== undefined) {
    assertMilliseconds('backend.requestTimeoutMs', requestTimeoutMs, (ms) => Number.isFinite(ms) && ms > 0 && ms <= 2_147_483_647, 'a finite number of milliseconds above 0');
  }
  if (driftFactor !== undefined && (typeof driftFactor !== 'number' || !(driftFactor >= 0 && driftFactor < 0.5))) {
    throw new LockConfigError('backend.driftFactor', `must be a number from 0 to below 0.5 (a fraction of the ttl), got ${String(driftFactor)}.`);
  }
  if (options.restartProtection !== undefined && typeof options.restartProtection !== 'boolean') {
    throw new LockConfigError('backend.restartProtection', `must be true (the default) or false, got ${JSON.stringify(options.restartProtection)}.`);
  }
  if (retryJitterMs !== undefined) {
    assertMilliseconds('backend.retryJitterMs', retryJitterMs, (ms) => Number.isFinite(ms) && ms >= 0, 'a finite number of milliseconds, 0 or more');
  }
}

function assertMasterCount(option: string, count: number): void {
  if (count < MIN_MASTERS) throw new LockConfigError(option, `Redlock needs at least ${MIN_MASTERS} independent masters (a majority must survive one loss), got ${count}.`);
}

/** How many masters must agree: a majority of N, so any two majorities share a master. */
export function quorum(masters: number): number {
  return Math.floor(masters / 2) + 1;
}
