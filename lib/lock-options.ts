import type { BackendSettings } from './backends/backend-definition';
import type { EntryMode } from './backends/lock-backend.interface';
import { validateBackendOptions, type BackendOptions } from './backends/registry';
import { LockConfigError } from './errors';
import { DEFAULT_KEY_PREFIX, DEFAULT_SERVER_TIMEOUT_MS, DEFAULT_TTL_MS, DEFAULT_WAIT_TIMEOUT_MS, defaultHolderDescription, MAX_HOLDER_DESCRIPTION_LENGTH, MAX_LOCK_DELAY_MS, MAX_TIMER_MS } from './lock-defaults';
import { assertMilliseconds, rejectUnknownFields } from './option-checks';

export { DEFAULT_KEY_PREFIX, DEFAULT_SERVER_TIMEOUT_MS, DEFAULT_TTL_MS, DEFAULT_WAIT_TIMEOUT_MS, MAX_LOCK_DELAY_MS, MAX_TIMER_MS };
export type { BackendOptions };

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
  /**
   * Lock-delay (Consul's): when this holder's lease runs out without a release (a crash, a pause,
   * a partition), the server grants the name to nobody for this long after the lease ended; a
   * clean release hands it on at once. Counted by the server, so no client's clock can shorten
   * it. Default 0 (off); at most 60000. The holder's own setting decides the delay after it.
   */
  lockDelayMs?: number;
}

/** What `withLock` and `@WithLock` do when the lock is not taken within `waitTimeoutMs`. */
export type OnTimeout = 'throw' | 'skip';

/**
 * 'write' (the default): the exclusive lock. 'read': shared with every other reader of the name,
 * excluded by a writer; a reader that arrives while a writer waits queues behind that writer.
 */
export type LockMode = 'write' | 'read';

/** Options of one lock call (`acquire`, `tryAcquire`, `withLock`, `@WithLock`). */
export interface CallOptions extends LockOptions {
  /** Default 'write'. See LockMode. */
  mode?: LockMode;
}

/** Per call only. */
export interface AcquireOptions extends CallOptions {
  /** Stop waiting when this aborts; `acquire` rejects with the signal's reason. */
  signal?: AbortSignal;
}

/** Options of a call that runs code under the lock: `withLock` and `@WithLock`. */
export interface RunOptions extends CallOptions {
  /**
   * Default 'throw' (LockTimeoutError). 'skip': the code does not run, the call resolves to
   * `undefined` and a debug line is logged: a job that another replica is already running is
   * skipped quietly. With `waitTimeoutMs: 0` it is a try.
   */
  onTimeout?: OnTimeout;
  /**
   * The lock stays held at least this long after it was taken, even when the code returns
   * sooner: the release then happens in the background, and the caller is not delayed. Default
   * 0. At most `ttlMs`, so the server's lease covers it. A run-once job's guard against a
   * replica whose clock fires a little later (ShedLock's `lockAtLeastFor`).
   */
  minHoldMs?: number;
}

/** As RunOptions, for `withLock`, which also takes a `signal`. */
export interface WithLockOptions extends RunOptions, AcquireOptions {}

/** The options of a semaphore call: a lock call's, without `mode` (every holder takes a permit). */
export type SemaphoreOptions = Omit<WithLockOptions, 'mode'>;

export interface DistributedLockModuleOptions extends LockOptions {
  /** Default `{ type: 'memory' }`: the embedded in-process backend. */
  backend?: BackendOptions;
  /** Prepended to every lock name, to share a server between apps. Default 'lock:'. */
  keyPrefix?: string;
  /**
   * How long a call waits for the server (a connection, or the answer to a request with no wait
   * of its own) before failing with LockServerUnreachableError naming it. Default 5000.
   * An acquisition waits at most `min(waitTimeoutMs, serverTimeoutMs)` for an unreachable server.
   */
  serverTimeoutMs?: number;
  /**
   * Record Prometheus metrics with `prom-client` (an optional peer: npm install prom-client).
   * `true`: in prom-client's default registry; `{ registry }`: in that one. Default off.
   * See the README's "Operations" section for the metric names.
   */
  metrics?: boolean | { registry?: MetricsRegistry };
  /**
   * A `lock.acquire` span per acquisition through `@opentelemetry/api` (an optional peer).
   * Default true: on when that package is installed; false turns it off.
   */
  tracing?: boolean;
  /**
   * The lock doctor at boot: checks what the backend's servers let a client read (eviction and
   * persistence on Redis, fsync on PostgreSQL, the granted session timeout on ZooKeeper, known
   * bugs of the etcd version, Redlock masters that are not independent, clock skew); see the
   * README, "The lock doctor". Default 'warn': the checks run in the background after boot and
   * log one warning per finding (nothing on the request path). 'fail': the boot waits for them
   * and fails with LockDoctorError when anything is found or a server cannot be asked. 'off':
   * no checks. The CLI `npx nest-distributed-lock doctor` runs the same checks.
   */
  doctor?: DoctorMode;
  /**
   * How inspect() names this process as a lock's holder, e.g. a pod name. Default
   * `'<host name> pid <pid>'`. At most 256 characters. Stored once per session, never per lock:
   * see the README, "Inspect", for the backends that keep it.
   */
  holderDescription?: string;
}

/** See DistributedLockModuleOptions.doctor. */
export type DoctorMode = 'warn' | 'fail' | 'off';

/**
 * A prom-client `Registry` (typed by its shape, so these types never import the optional
 * package): the library's metrics are registered there, or found there when already registered.
 */
export interface MetricsRegistry {
  registerMetric(metric: never): void;
  getSingleMetric(name: string): unknown;
}

export interface ResolvedLockOptions {
  readonly ttlMs: number;
  readonly renewIntervalMs: number | undefined;
  readonly renew: boolean;
  readonly waitTimeoutMs: number;
  readonly onLockLost: OnLockLost;
  /** The entry the call puts: a lock's mode, or 'permit' for a semaphore. */
  readonly mode: EntryMode;
  /** For a permit: the semaphore's limit. */
  readonly limit: number | undefined;
  /** 0: off. See LockOptions.lockDelayMs. */
  readonly lockDelayMs: number;
}

export interface ResolvedModuleOptions extends ResolvedRunOptions {
  readonly backend: BackendOptions;
  readonly keyPrefix: string;
  readonly serverTimeoutMs: number;
  /** undefined: no metrics; null: prom-client's default registry. */
  readonly metricsRegistry: MetricsRegistry | null | undefined;
  readonly tracing: boolean;
  readonly doctor: DoctorMode;
  readonly holderDescription: string;
}

/** The options a call may give (@WithLock, withLock, acquire, tryAcquire); `signal` where it waits. */
const LEASE_OPTION_FIELDS = ['ttlMs', 'renewIntervalMs', 'renew', 'waitTimeoutMs', 'onLockLost', 'lockDelayMs'] as const;
const LOCK_OPTION_FIELDS = [...LEASE_OPTION_FIELDS, 'mode'];
const ACQUIRE_OPTION_FIELDS = [...LOCK_OPTION_FIELDS, 'signal'];
const RUN_FIELDS = [...LOCK_OPTION_FIELDS, 'onTimeout', 'minHoldMs'];
const WITH_LOCK_FIELDS = [...RUN_FIELDS, 'signal'];
const MODULE_OPTION_FIELDS = [...LEASE_OPTION_FIELDS, 'backend', 'keyPrefix', 'serverTimeoutMs', 'metrics', 'tracing', 'doctor', 'holderDescription'];
/** A semaphore call's fields: a lock call's without `mode`; `signal` where it waits, as for locks. */
export const SEMAPHORE_RUN_FIELDS: readonly string[] = WITH_LOCK_FIELDS.filter((field) => field !== 'mode');
export const SEMAPHORE_DECORATOR_FIELDS: readonly string[] = RUN_FIELDS.filter((field) => field !== 'mode');

/** What `withLock` and `@WithLock` add to the lock options, resolved. */
export interface ResolvedRunOptions extends ResolvedLockOptions {
  readonly onTimeout: OnTimeout;
  readonly minHoldMs: number;
}

/**
 * Resolves the options of a call that runs code under the lock (`withLock`, `@WithLock`):
 * the lock options over the module's, then `onTimeout` and `minHoldMs`, checked against the
 * call's ttlMs. `signal`: whether this caller may give one (withLock does, @WithLock does not).
 */
export function resolveRunOptions(
  options: RunOptions | undefined,
  defaults: ResolvedRunOptions,
  signal: boolean,
  known: readonly string[] = signal ? WITH_LOCK_FIELDS : RUN_FIELDS,
): ResolvedRunOptions {
  if (!options) return defaults;
  const resolved = resolveLockOptions(options, defaults, known);
  const onTimeout = options.onTimeout ?? defaults.onTimeout;
  if (onTimeout !== 'throw' && onTimeout !== 'skip') throw new LockConfigError('onTimeout', `must be 'throw' or 'skip', got ${String(onTimeout)}.`);
  const minHoldMs = options.minHoldMs ?? defaults.minHoldMs;
  // Checked inline first: the closures that word a failure are made only when it fails.
  if (!(typeof minHoldMs === 'number' && minHoldMs >= 0 && minHoldMs <= resolved.ttlMs)) {
    assertMilliseconds('minHoldMs', minHoldMs, (ms) => ms >= 0 && ms <= resolved.ttlMs, () => `0 to ttlMs (${resolved.ttlMs}) milliseconds, so the lease covers it; raise ttlMs for a longer hold`);
  }
  // Spelled out rather than spread: every lock call passes here.
  const { ttlMs, renewIntervalMs, renew, waitTimeoutMs, onLockLost, mode, limit, lockDelayMs } = resolved;
  return { ttlMs, renewIntervalMs, renew, waitTimeoutMs, onLockLost, mode, limit, lockDelayMs, onTimeout, minHoldMs };
}

/** Validates the module options at startup, so a typo fails the boot, not the first request. */
export function resolveModuleOptions(options: DistributedLockModuleOptions = {}): ResolvedModuleOptions {
  if (typeof options !== 'object' || options === null) {
    throw new LockConfigError('options', 'DistributedLockModule.forRoot() takes an options object.');
  }
  rejectUnknownFields(options, MODULE_OPTION_FIELDS, 'a DistributedLockModule');
  const backend: BackendOptions = options.backend ?? { type: 'memory' };
  validateBackendOptions(backend);
  const keyPrefix = options.keyPrefix ?? DEFAULT_KEY_PREFIX;
  if (typeof keyPrefix !== 'string' || Buffer.byteLength(keyPrefix) > 128) {
    throw new LockConfigError('keyPrefix', 'must be a string of at most 128 bytes.');
  }
  const serverTimeoutMs = options.serverTimeoutMs ?? DEFAULT_SERVER_TIMEOUT_MS;
  assertMilliseconds('serverTimeoutMs', serverTimeoutMs, (ms) => ms > 0 && ms <= MAX_TIMER_MS, `above 0 and at most ${MAX_TIMER_MS} milliseconds`);
  const tracing = options.tracing ?? true;
  if (typeof tracing !== 'boolean') throw new LockConfigError('tracing', `must be true or false, got ${String(tracing)}.`);
  const doctor = options.doctor ?? 'warn';
  if (doctor !== 'warn' && doctor !== 'fail' && doctor !== 'off') throw new LockConfigError('doctor', `must be 'warn' (the default), 'fail' or 'off', got ${JSON.stringify(doctor)}.`);
  const holderDescription = options.holderDescription ?? defaultHolderDescription();
  if (typeof holderDescription !== 'string' || holderDescription === '' || holderDescription.length > MAX_HOLDER_DESCRIPTION_LENGTH) {
    throw new LockConfigError('holderDescription', `must be a non-empty string of at most ${MAX_HOLDER_DESCRIPTION_LENGTH} characters, e.g. a pod name, got ${JSON.stringify(holderDescription)}.`);
  }
  return {
    ...DEFAULT_LOCK_OPTIONS,
    ...resolveLockOptions(options, DEFAULT_LOCK_OPTIONS, MODULE_OPTION_FIELDS),
    backend,
    keyPrefix,
    serverTimeoutMs,
    metricsRegistry: metricsRegistryOf(options.metrics),
    tracing,
    doctor,
    holderDescription,
  };
}

function metricsRegistryOf(metrics: DistributedLockModuleOptions['metrics']): MetricsRegistry | null | undefined {
  if (metrics === undefined || metrics === false) return undefined;
  if (metrics === true) return null;
  if (typeof metrics !== 'object' || metrics === null) {
    throw new LockConfigError('metrics', `must be true, false or { registry }, got ${String(metrics)}.`);
  }
  rejectUnknownFields(metrics, ['registry'], 'a metrics', 'metrics.');
  const registry = metrics.registry;
  if (registry === undefined) return null;
  if (typeof (registry as Partial<MetricsRegistry>)?.registerMetric !== 'function' || typeof (registry as Partial<MetricsRegistry>).getSingleMetric !== 'function') {
    throw new LockConfigError('metrics.registry', "must be a prom-client Registry (new Registry() from 'prom-client').");
  }
  return registry;
}

/** What a backend built by the module follows (see BackendSettings). */
export function backendSettings(options: ResolvedModuleOptions): BackendSettings {
  return { ttlMs: options.ttlMs, serverTimeoutMs: options.serverTimeoutMs, holderDescription: options.holderDescription, keyPrefix: options.keyPrefix };
}

/** The defaults of every per-call option, before the module's options apply. */
export const DEFAULT_LOCK_OPTIONS: ResolvedRunOptions = {
  ttlMs: DEFAULT_TTL_MS,
  renewIntervalMs: undefined,
  renew: true,
  waitTimeoutMs: DEFAULT_WAIT_TIMEOUT_MS,
  onLockLost: 'throw',
  mode: 'write',
  limit: undefined,
  lockDelayMs: 0,
  onTimeout: 'throw',
  minHoldMs: 0,
};

/**
 * Merges per-call options over the module's, validating what the call changed. `known`: the
 * fields this caller may give (`signal` only where the call waits).
 */
export function resolveLockOptions(
  options: LockOptions | undefined,
  defaults: ResolvedLockOptions,
  known: readonly string[] = ACQUIRE_OPTION_FIELDS,
): ResolvedLockOptions {
  if (!options) return defaults;
  if (typeof options !== 'object') throw new LockConfigError('options', `must be an object of lock options, got ${String(options)}.`);
  rejectUnknownFields(options, known, 'a lock');
  // Each range is checked inline first: the closures that word a failure are made only when it fails.
  const ttlMs = options.ttlMs ?? defaults.ttlMs;
  if (!(typeof ttlMs === 'number' && ttlMs > 0 && ttlMs <= MAX_TIMER_MS)) assertTtl('ttlMs', ttlMs);
  const renewIntervalMs = options.renewIntervalMs ?? (options.ttlMs === undefined ? defaults.renewIntervalMs : undefined);
  if (renewIntervalMs !== undefined && !(typeof renewIntervalMs === 'number' && renewIntervalMs > 0 && renewIntervalMs < ttlMs)) {
    assertMilliseconds('renewIntervalMs', renewIntervalMs, (ms) => ms > 0 && ms < ttlMs, () => `above 0 and below ttlMs (${ttlMs}); leave it unset for ttlMs / 3`);
  }
  const waitTimeoutMs = options.waitTimeoutMs ?? defaults.waitTimeoutMs;
  if (!(typeof waitTimeoutMs === 'number' && waitTimeoutMs >= 0 && (waitTimeoutMs <= MAX_TIMER_MS || waitTimeoutMs === Infinity))) {
    assertMilliseconds('waitTimeoutMs', waitTimeoutMs, (ms) => ms >= 0 && (ms <= MAX_TIMER_MS || ms === Infinity), WAIT_RANGE);
  }
  const renew = options.renew ?? defaults.renew;
  if (typeof renew !== 'boolean') throw new LockConfigError('renew', `must be true or false, got ${String(renew)}.`);
  const onLockLost = options.onLockLost ?? defaults.onLockLost;
  if (onLockLost !== 'throw' && onLockLost !== 'ignore') {
    throw new LockConfigError('onLockLost', `must be 'throw' or 'ignore', got ${String(onLockLost)}.`);
  }
  const mode = (options as CallOptions).mode ?? defaults.mode;
  if (mode !== defaults.mode && mode !== 'write' && mode !== 'read') throw new LockConfigError('mode', `must be 'write' or 'read', got ${String(mode)}.`);
  const lockDelayMs = options.lockDelayMs ?? defaults.lockDelayMs;
  if (lockDelayMs !== defaults.lockDelayMs) assertLockDelay(lockDelayMs);
  return { ttlMs, renewIntervalMs, renew, waitTimeoutMs, onLockLost, mode, limit: defaults.limit, lockDelayMs };
}

/** The largest semaphore limit: a permit count every backend stores as a 32-bit integer. */
export const MAX_SEMAPHORE_LIMIT = 2 ** 31 - 1;

/** A semaphore's limit: a positive integer, checked before any I/O. */
export function assertSemaphoreLimit(limit: unknown): asserts limit is number {
  if (typeof limit !== 'number' || !Number.isInteger(limit) || limit < 1 || limit > MAX_SEMAPHORE_LIMIT) {
    throw new LockConfigError('limit', `a semaphore's limit must be a whole number from 1 to ${MAX_SEMAPHORE_LIMIT}, got ${typeof limit === 'string' ? `"${limit}"` : String(limit)}.`);
  }
}

/** A lock-delay: 0 (off) to 60 s, whole or not, checked before any I/O. */
export function assertLockDelay(lockDelayMs: unknown): asserts lockDelayMs is number {
  assertMilliseconds('lockDelayMs', lockDelayMs, (ms) => ms >= 0 && ms <= MAX_LOCK_DELAY_MS, LOCK_DELAY_RANGE);
}

/** Built once: every lock call checks its options, and only a failed check needs the words. */
const TTL_RANGE = `above 0 and at most ${MAX_TIMER_MS} milliseconds (about 24.8 days)`;
const LOCK_DELAY_RANGE = `0 (off) to ${MAX_LOCK_DELAY_MS} milliseconds (Consul's cap: a crashed holder blocks the name for at most a minute more)`;
const WAIT_RANGE = `0 to ${MAX_TIMER_MS} milliseconds, or Infinity to wait forever`;

/** A lease length: what `ttlMs` and `extend(ttlMs)` accept. */
export function assertTtl(option: string, ttlMs: unknown): asserts ttlMs is number {
  assertMilliseconds(option, ttlMs, (ms) => ms > 0 && ms <= MAX_TIMER_MS, TTL_RANGE);
}

/** The fields @WithLock and tryAcquire accept (no `signal`: they take none). */
export const CALL_OPTION_FIELDS: readonly string[] = LOCK_OPTION_FIELDS;

/**
 * A call's options, resolved, as a semaphore's: every holder takes one permit of `limit`.
 * Options from a lock call's resolution keep their checks; only the entry changes.
 */
export function asPermit<T extends ResolvedLockOptions>(resolved: T, limit: number): T {
  return { ...resolved, mode: 'permit', limit };
}
