import type { DoctorReport } from './backend-doctor';
import type { LockBackend } from './lock-backend.interface';

/** What the module knows when it builds a backend: the defaults a session-based backend follows. */
export interface BackendSettings {
  /** The module's `ttlMs`: etcd and ZooKeeper size their session from it unless told otherwise. */
  readonly ttlMs: number;
  /** The module's `serverTimeoutMs`: how long a connection or a request may go unanswered. */
  readonly serverTimeoutMs: number;
  /**
   * The module's `holderDescription` (host name and pid by default): stored once per session
   * where a backend keeps sessions at the server (etcd, ZooKeeper), else once per process with
   * an expiry (Redis, Redlock, PostgreSQL), shown by inspect() with each holder. Optional for
   * backends built outside the module: they store none.
   */
  readonly holderDescription?: string;
  /** The module's `keyPrefix`: what the backend's records beside the locks are kept under (the holder descriptions of etcd and the Redis family). */
  readonly keyPrefix?: string;
}

/**
 * One backend, as its folder exports it: the registry (backends/registry.ts) is a list of these,
 * so adding a backend is a folder and one line there.
 */
export interface BackendDefinition<Options extends { type: string }> {
  readonly type: Options['type'];
  /** Checks the options before any I/O; throws LockConfigError naming the field to change. */
  validate(options: Options): void;
  /**
   * Builds the backend, loading its client library only now (an optional peer). Never waits for
   * the server: a backend connects in the background and bounds its first calls instead.
   */
  create(options: Options, settings: BackendSettings): LockBackend | Promise<LockBackend>;
  /**
   * The lock doctor's checks of the server's configuration (lib/doctor): reads only, on a
   * connection of its own that it closes (or on a supplied client, left as it is). Loads its
   * client library only when run. Resolves with what it found, a server it could not reach included.
   */
  doctor(options: Options, settings: BackendSettings): Promise<DoctorReport>;
}

/** Types a definition without widening its `type` literal. */
export function defineBackend<Options extends { type: string }>(definition: BackendDefinition<Options>): BackendDefinition<Options> {
  return definition;
}
