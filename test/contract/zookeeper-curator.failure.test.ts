import { startZooKeeperServer } from '../../servers/zookeeper-server';
import { processFaults } from '../support/server-faults';
import { TcpProxy } from '../support/tcp-proxy';
import { runFailureContract } from './failure.contract';

// No sessionTimeoutMs: the session follows the module's ttlMs. InterProcessMutex's layout: the exclusive lock only.
runFailureContract({
  name: 'zookeeper (protocol curator)',
  lockDelay: false,
  modes: false,
  async start() {
    const zookeeper = await startZooKeeperServer();
    const proxy = await TcpProxy.start(zookeeper.port);
    return {
      direct: { backend: { type: 'zookeeper', connectionString: zookeeper.connectionString, protocol: 'curator' }, address: zookeeper.connectionString },
      proxied: { backend: { type: 'zookeeper', connectionString: proxy.address, protocol: 'curator' }, address: proxy.address },
      faults: processFaults(zookeeper.server, proxy),
      async stop() {
        await proxy.stop();
        await zookeeper.stop();
      },
    };
  },
});
