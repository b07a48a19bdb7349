import type { BackendOptions } from '../lock-options';
import type { LockBackend } from './lock-backend.interface';
import { MemoryLockBackend } from './memory/memory.backend';

/**
 * Builds the backend named by the `backend` option. Backends with client libraries are loaded
 * only when chosen, so an app on Redis never needs etcd3 installed, and vice versa.
 */
export async function createBackend(options: BackendOptions): Promise<LockBackend> {
  switch (options.type) {
    case 'memory':
      return new MemoryLockBackend();
    case 'custom':
      return options.backend;
    case 'etcd':
      return (await import('./etcd/etcd.backend')).createEtcdBackend(options);
    case 'redis':
      return (await import('./redis/redis.backend')).createRedisBackend(options);
    case 'zookeeper':
      return (await import('./zookeeper/create-zookeeper-backend')).createZooKeeperBackend(options);
  }
}
