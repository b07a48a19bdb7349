import { EtcdCluster } from '../../servers/etcd-server';
import { TcpProxy } from '../support/tcp-proxy';
import { memberFaults } from './etcd-member-faults';
import { runFailureContract } from './failure.contract';

// One member; no sessionTtlMs: the session follows the module's ttlMs, which is what point 4 checks.
runFailureContract({
  name: 'etcd',
  async start() {
    const cluster = await EtcdCluster.start(1);
    const port = Number(new URL(cluster.hostOf(0)).port);
    const proxy = await TcpProxy.start(port);
    return {
      direct: { backend: { type: 'etcd', hosts: cluster.hosts }, address: `127.0.0.1:${port}` },
      proxied: { backend: { type: 'etcd', hosts: [`http://${proxy.address}`] }, address: proxy.address },
      faults: memberFaults(cluster, proxy),
      async stop() {
        await proxy.stop();
        await cluster.stop();
      },
    };
  },
});
