import { createZooKeeperBackend } from '../../lib/backends/zookeeper/create-zookeeper-backend';
import { startZooKeeperServer } from '../../servers/zookeeper-server';
import { runLockContract } from './lock-backend.contract';

// Curator's InterProcessMutex layout grants the exclusive lock only (no read locks, no semaphores):
// the read mode of InterProcessReadWriteLock is covered by zookeeper-curator.test.ts against Curator itself.
const backend = (connectionString: string) =>
  ({ type: 'zookeeper', connectionString, sessionTimeoutMs: 10_000, protocol: 'curator' }) as const;

runLockContract({
  name: 'zookeeper (protocol curator)',
  modes: false,
  async start() {
    const zookeeper = await startZooKeeperServer();
    return {
      newClient: async () => createZooKeeperBackend(backend(zookeeper.connectionString)),
      processBackend: backend(zookeeper.connectionString),
      stop: () => zookeeper.stop(),
    };
  },
});
