import type { BackendSettings } from '../backend-definition';
import { loadPeer } from '../load-peer';
import { DEFAULT_SERVER_TIMEOUT_MS, DEFAULT_TTL_MS } from '../../lock-defaults';
import type { ZkModule } from './zookeeper-client';
import { resolveZooKeeperOptions, type ZooKeeperBackendOptions } from './zookeeper-options';
import { ZooKeeperLockBackend } from './zookeeper.backend';

/**
 * Validates the options first (no I/O), then loads node-zookeeper-client. Connects in the
 * background; never waits. The session timeout follows the module's ttlMs unless
 * `sessionTimeoutMs` is set: a crashed holder's node lives as long as its session.
 */
export function createZooKeeperBackend(options: ZooKeeperBackendOptions, settings: BackendSettings = { ttlMs: DEFAULT_TTL_MS, serverTimeoutMs: DEFAULT_SERVER_TIMEOUT_MS }): ZooKeeperLockBackend {
  const resolved = resolveZooKeeperOptions(options);
  const sessionTimeoutMs = resolved.sessionTimeoutMs ?? Math.ceil(settings.ttlMs);
  return new ZooKeeperLockBackend(loadPeer<ZkModule>('node-zookeeper-client', 'zookeeper'), { ...resolved, sessionTimeoutMs }, settings.serverTimeoutMs, settings.holderDescription);
}
