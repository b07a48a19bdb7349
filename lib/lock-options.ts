import { LockConfigError } from './errors';
import type { LockBackend } from './backends/lock-backend.interface';
import type { ZooKeeperBackendOptions } from './backends/zookeeper/zookeeper-options';
import type { RedisBackendOptions } from './backends/redis/redis-options';
import type { EtcdBackendOptions } from './backends/etcd/etcd-options';

/** What to do when a decorated method or `withLock` callback finishes after its lock was lost. */
export type OnLockLost = 'throw' | 'ignore';

/** Options shared by the module (defaults) and every call (overrides). */
export interface LockOptions {
  /**
   * Lease length. Default 30000, at most MAX_TIMER_MS (about 24.8 days). The lease is renewed
   * while the lock is held (see `renew`).
   */
  ttlMs?: number;
  /** How often the lease is renewed. Default `ttlMs / 3`; must be below `ttlMs`. */
  renewIntervalMs?: number;
  /** Keep the lease alive while held. Default true; false = the lock lasts at most `ttlMs`. */
  renew?: boolean;
  /**
   * How long `acquire` and `@WithLock` wait in the queue. Default 10000; `Infinity` waits
   * forever; `0` takes the lock only if it is free now (as `tryAcquire`), else LockTimeoutError.
   */
  waitTimeoutMs?: number;
  /** Default 'throw': a call whose lock was lost ends with LockLostError instead of its result. */
  onLockLost?: OnLockLost;
}

/** Per call only. */
export interface AcquireOptions extends LockOptions {
  /** Stop waiting when this aborts; `acquire` rejects with the signal's reason. */
  signal?: AbortSignal;
}

export interface MemoryBackendOptions {
  type: 'memory';
}

/** Bring your own implementation of the backend contract. The module closes it on shutdown. */
export interface CustomBackendOptions {
  type: 'custom';
  backend: LockBackend;
}

/** Every backend the module can build; the backend issues add theirs here. */
export type BackendOptions = MemoryBackendOptions | CustomBackendOptions | RedisBackendOptions | ZooKeeperBackendOptions | EtcdBackendOptions;

export interface DistributedLockModuleOptions extends LockOptions {
  /** Default `{ type: 'memory' }`: the embedded in-process backend. */
  backend?: BackendOptions;
  /** Prepended to every lock name, to share a server between apps. Default 'lock:'. */
  keyPrefix?: string;
}

export interface ResolvedLockOptions {
  readonly ttlMs: number;
  readonly renewIntervalMs: number | undefined;
  readonly renew: boolean;
  readonly waitTimeoutMs: number;
  readonly onLockLost: OnLockLost;
}

export interface ResolvedModuleOptions extends ResolvedLockOptions {
  readonly backend: BackendOptions;
  readonly keyPrefix: string;
}

export const DEFAULT_TTL_MS = 30_000;
export const DEFAULT_WAIT_TIMEOUT_MS = 10_000;
export const DEFAULT_KEY_PREFIX = 'lock:';
/** Node clamps a longer timer to 1 ms: a 30-day ttl would expire at once. About 24.8 days. */
export const MAX_TIMER_MS = 2 ** 31 - 1;
const KNOWN_BACKENDS = ['memory', 'custom', 'redis', 'zookeeper', 'etcd'];

/** Validates the module options at startup, so a typo fails the boot, not the first request. */
export function resolveModuleOptions(options: DistributedLockModuleOptions = {}): ResolvedModuleOptions {
  if (typeof options !== 'object' || options === null) {
    throw new LockConfigError('options', 'DistributedLockModule.forRoot() takes an options object.');
  }
  const backend = options.backend ?? { type: 'memory' };
  if (typeof backend !== 'object' || !KNOWN_BACKENDS.includes((backend as { type: string }).type)) {
    throw new LockConfigError(
      'backend.type',
      `"${(backend as { type?: unknown })?.type}" is not a backend; use one of ${KNOWN_BACKENDS.map((t) => `'${t}'`).join(', ')}.`,
    );
  }
  const keyPrefix = options.keyPrefix ?? DEFAULT_KEY_PREFIX;
  if (typeof keyPrefix !== 'string' || Buffer.byteLength(keyPrefix) > 128) {
    throw new LockConfigError('keyPrefix', 'must be a string of at most 128 bytes.');
  }
  return { backend, keyPrefix, ...resolveLockOptions(options, DEFAULT_LOCK_OPTIONS) };
}

/** The defaults of every per-call option, before the module's options apply. */
export const DEFAULT_LOCK_OPTIONS: ResolvedLockOptions = {
  ttlMs: DEFAULT_TTL_MS,
  renewIntervalMs: undefined,
  renew: true,
  waitTimeoutMs: DEFAULT_WAIT_TIMEOUT_MS,
  onLockLost: 'throw',
};

/** Merges per-call options over the module's, validating what the call changed. */
export function resolveLockOptions(options: LockOptions | undefined, defaults: ResolvedLockOptions): ResolvedLockOptions {
  if (!options) return defaults;
  const ttlMs = options.ttlMs ?? defaults.ttlMs;
  assertTtl('ttlMs', ttlMs);
  const renewIntervalMs = options.renewIntervalMs ?? (options.ttlMs === undefined ? defaults.renewIntervalMs : undefined);
  if (
    renewIntervalMs !== undefined &&
    (typeof renewIntervalMs !== 'number' || !(renewIntervalMs > 0) || renewIntervalMs >= ttlMs)
  ) {
    throw new LockConfigError(
      'renewIntervalMs',
      `must be above 0 and below ttlMs (${ttlMs}), got ${String(renewIntervalMs)}; leave it unset for ttlMs / 3.`,
    );
  }
  const waitTimeoutMs = options.waitTimeoutMs ?? defaults.waitTimeoutMs;
  if (typeof waitTimeoutMs !== 'number' || !(waitTimeoutMs >= 0) || (waitTimeoutMs > MAX_TIMER_MS && waitTimeoutMs !== Infinity)) {
    throw new LockConfigError(
      'waitTimeoutMs',
      `must be 0 to ${MAX_TIMER_MS} milliseconds, or Infinity to wait forever, got ${String(waitTimeoutMs)}.`,
    );
  }
  const renew = options.renew ?? defaults.renew;
  if (typeof renew !== 'boolean') throw new LockConfigError('renew', `must be true or false, got ${String(renew)}.`);
  const onLockLost = options.onLockLost ?? defaults.onLockLost;
  if (onLockLost !== 'throw' && onLockLost !== 'ignore') {
    throw new LockConfigError('onLockLost', `must be 'throw' or 'ignore', got ${String(onLockLost)}.`);
  }
  return { ttlMs, renewIntervalMs, renew, waitTimeoutMs, onLockLost };
}

/** A lease length: what `ttlMs` and `extend(ttlMs)` accept. */
export function assertTtl(option: string, ttlMs: unknown): asserts ttlMs is number {
  if (typeof ttlMs !== 'number' || !(ttlMs > 0) || ttlMs > MAX_TIMER_MS) {
    throw new LockConfigError(option, `must be above 0 and at most ${MAX_TIMER_MS} milliseconds (about 24.8 days), got ${String(ttlMs)}.`);
  }
}
