import { startZooKeeperServer } from '../../servers/zookeeper-server';
import { processFaults } from '../support/server-faults';
import { TcpProxy } from '../support/tcp-proxy';
import { runFailureContract } from './failure.contract';

// No sessionTimeoutMs: the session follows the module's ttlMs, which is what point 4 checks.
runFailureContract({
  name: 'zookeeper',
  async start() {
    const zookeeper = await startZooKeeperServer();
    const proxy = await TcpProxy.start(zookeeper.port);
    return {
      direct: { backend: { type: 'zookeeper', connectionString: zookeeper.connectionString }, address: zookeeper.connectionString },
      proxied: { backend: { type: 'zookeeper', connectionString: proxy.address }, address: proxy.address },
      faults: processFaults(zookeeper.server, proxy),
      async stop() {
        await proxy.stop();
        await zookeeper.stop();
      },
    };
  },
});
