import type { BackendSettings } from '../backend-definition';
import { loadPeer } from '../load-peer';
import type { ZkModule } from './zookeeper-client';
import { resolveZooKeeperOptions, type ZooKeeperBackendOptions } from './zookeeper-options';
import { ZooKeeperLockBackend } from './zookeeper.backend';

/** Validates the options first (no I/O), then loads node-zookeeper-client. Connects on first use. */
export function createZooKeeperBackend(options: ZooKeeperBackendOptions, _settings?: BackendSettings): ZooKeeperLockBackend {
  const resolved = resolveZooKeeperOptions(options);
  return new ZooKeeperLockBackend(loadPeer<ZkModule>('node-zookeeper-client', 'zookeeper'), resolved);
}
