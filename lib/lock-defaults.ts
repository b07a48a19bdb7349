import { hostname } from 'node:os';

/** The defaults of the module's options, in one place so backends can follow them too. */
export const DEFAULT_TTL_MS = 30_000;
export const DEFAULT_WAIT_TIMEOUT_MS = 10_000;
export const DEFAULT_SERVER_TIMEOUT_MS = 5_000;
export const DEFAULT_KEY_PREFIX = 'lock:';
/** Node clamps a longer timer to 1 ms: a 30-day ttl would expire at once. About 24.8 days. */
export const MAX_TIMER_MS = 2 ** 31 - 1;
/** The longest lock-delay: Consul's cap, so a forgotten holder cannot block a name for long. */
export const MAX_LOCK_DELAY_MS = 60_000;

/**
 * How far a server's clock may run ahead of ours over a lease of `ttlMs` (1% + 2 ms): every
 * local deadline ends that much before the server's.
 */
export function driftAllowanceMs(ttlMs: number): number {
  return ttlMs * 0.01 + 2;
}

/** The module's default `holderDescription`: which machine and process holds a lock, for inspect(). */
export function defaultHolderDescription(): string {
  return `${hostname()} pid ${process.pid}`;
}

/** A `holderDescription` longer than this is a LockConfigError: it is stored with each session. */
export const MAX_HOLDER_DESCRIPTION_LENGTH = 256;
/**
 * How long a backend's holder record (Redis, Redlock, PostgreSQL) outlives its last refresh, so a
 * process that died leaves it this long at most; it is refreshed every third of that, as leases
 * are renewed, so one failed refresh leaves another before it ends.
 */
export const HOLDER_RECORD_TTL_MS = 60_000;
export const HOLDER_RECORD_REFRESH_MS = HOLDER_RECORD_TTL_MS / 3;
