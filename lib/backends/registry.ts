import { LockConfigError } from '../errors';
import { DEFAULT_SERVER_TIMEOUT_MS, DEFAULT_TTL_MS } from '../lock-defaults';
import type { BackendDefinition, BackendSettings } from './backend-definition';
import { customBackend } from './custom/custom.definition';
import { etcdBackend } from './etcd/etcd.definition';
import type { LockBackend } from './lock-backend.interface';
import { memoryBackend } from './memory/memory.definition';
import { postgresBackend } from './postgres/postgres.definition';
import { redisBackend } from './redis/redis.definition';
import { redlockBackend } from './redlock/redlock.definition';
import { zookeeperBackend } from './zookeeper/zookeeper.definition';

/** Every backend the module can build: adding one is its folder and a line here. */
const BACKENDS = [memoryBackend, customBackend, redisBackend, redlockBackend, etcdBackend, zookeeperBackend, postgresBackend] as const;

/** The `backend` option: the options of any registered backend, told apart by `type`. */
export type BackendOptions = Parameters<(typeof BACKENDS)[number]['validate']>[0];

export const BACKEND_TYPES: readonly string[] = BACKENDS.map((definition) => definition.type);

/** The definition of `options.type`, or a LockConfigError listing the types there are. */
export function backendDefinition(options: unknown): BackendDefinition<BackendOptions> {
  const type = (options as { type?: unknown } | null)?.type;
  const definition = BACKENDS.find((each) => each.type === type);
  if (typeof options !== 'object' || options === null || !definition) {
    throw new LockConfigError('backend.type', `${JSON.stringify(type)} is not a backend; use one of ${BACKEND_TYPES.map((t) => `'${t}'`).join(', ')}.`);
  }
  return definition as BackendDefinition<BackendOptions>;
}

/** Checks the options of the backend they name; no I/O. */
export function validateBackendOptions(options: unknown): asserts options is BackendOptions {
  backendDefinition(options).validate(options as BackendOptions);
}

/** Validates, then builds the backend; backends with client libraries load them only now. */
export async function createBackend(options: BackendOptions, settings: BackendSettings = DEFAULT_BACKEND_SETTINGS): Promise<LockBackend> {
  const definition = backendDefinition(options);
  definition.validate(options);
  return definition.create(options, settings);
}

/** What a backend built outside the module (tests, scripts) follows: the module's defaults. */
export const DEFAULT_BACKEND_SETTINGS: BackendSettings = { ttlMs: DEFAULT_TTL_MS, serverTimeoutMs: DEFAULT_SERVER_TIMEOUT_MS };
