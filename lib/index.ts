export { DistributedLockModule } from './distributed-lock.module';
export { LockService, type LockNames } from './lock.service';
export type { LockHolderJson, LockInspectionJson, LockInspectionResult } from './lock-inspection';
export { LockHandle } from './lock-handle';
export { WithLock, WithSemaphore } from './with-lock.decorator';
export { currentLock } from './lock-context';
export type { LockKeyTemplate } from './lock-key';
export {
  DEFAULT_KEY_PREFIX,
  DEFAULT_SERVER_TIMEOUT_MS,
  DEFAULT_TTL_MS,
  DEFAULT_WAIT_TIMEOUT_MS,
  MAX_LOCK_DELAY_MS,
  MAX_SEMAPHORE_LIMIT,
  type AcquireOptions,
  type BackendOptions,
  type CallOptions,
  type LockMode,
  type SemaphoreOptions,
  type DistributedLockModuleOptions,
  type DoctorMode,
  type LockOptions,
  type MetricsRegistry,
  type OnLockLost,
  type OnTimeout,
  type RunOptions,
  type WithLockOptions,
} from './lock-options';
export { DistributedLockHealthIndicator, HEALTH_CHECK_LOCK_NAME, type LockHealthResult } from './health/distributed-lock.health';
export { runDoctor, doctorExitCode, type DoctorFinding, type DoctorReport, type DoctorSeverity } from './doctor/run-doctor';
export { LockExceptionFilter, lockErrorResponse, type LockErrorBody } from './http/lock-exception.filter';
export {
  LOCK_CHANNELS,
  type AcquiredMessage,
  type AcquireMessage,
  type LockMessage,
  type LostMessage,
  type ReleasedMessage,
  type TimedOutMessage,
} from './diagnostics/lock-channels';
export type { MemoryBackendOptions } from './backends/memory/memory.definition';
export type { CustomBackendOptions } from './backends/custom/custom.definition';
export type { BackendDefinition, BackendSettings } from './backends/backend-definition';
export {
  DistributedLockError,
  LockBackendError,
  LockConfigError,
  LockDoctorError,
  LockKeyError,
  LockLostError,
  LockModeError,
  LockNameError,
  LockServerUnreachableError,
  LockTimeoutError,
  type LockLostReason,
} from './errors';
export type { AcquireRequest, EntryMode, LockBackend, LockGrant, LockHolder, LockInspection } from './backends/lock-backend.interface';
export { MemoryLockBackend } from './backends/memory/memory.backend';
export { MemoryLockStore } from './backends/memory/memory-lock-store';
export { LocalQueueBackend, type LocalQueueBackendOptions, type ServedGrant } from './queue/local-queue-backend';
export { Batch, batchToken, type BatchState } from './queue/batch';
export type { BatchEntries, LocalQueues } from './queue/local-queues';
export type { RedisBackendOptions, RedisClientLike, RedisProtocol } from './backends/redis/redis-options';
export type { RedlockBackendOptions } from './backends/redlock/redlock-options';
export type { ZooKeeperAclEntry, ZooKeeperBackendOptions, ZooKeeperPermission } from './backends/zookeeper/zookeeper-options';
export type { EtcdBackendOptions, Etcd3ClientLike, EtcdProtocol } from './backends/etcd/etcd-options';
export type { PgPoolLike, PostgresBackendOptions } from './backends/postgres/postgres-options';
export { postgresLockSchemaSql } from './backends/postgres/postgres-schema';
