import { createZooKeeperBackend } from '../../lib/backends/zookeeper/create-zookeeper-backend';
import { startZooKeeperServer } from '../../servers/zookeeper-server';
import { runLockContract } from './lock-backend.contract';

runLockContract({
  name: 'zookeeper',
  async start() {
    const zookeeper = await startZooKeeperServer();
    return {
      newClient: async () => createZooKeeperBackend({ type: 'zookeeper', connectionString: zookeeper.connectionString, sessionTimeoutMs: 10_000 }),
      processBackend: { type: 'zookeeper', connectionString: zookeeper.connectionString, sessionTimeoutMs: 10_000 },
      stop: () => zookeeper.stop(),
    };
  },
});
