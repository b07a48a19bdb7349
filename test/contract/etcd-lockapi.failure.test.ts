import { EtcdCluster } from '../../servers/etcd-server';
import { TcpProxy } from '../support/tcp-proxy';
import { memberFaults } from './etcd-member-faults';
import { runFailureContract } from './failure.contract';

// No sessionTtlMs: the session follows the module's ttlMs. etcd's Lock service: the exclusive lock
// only, and no FIFO across clients (etcd-lockapi.contract.test.ts says why).
runFailureContract({
  name: 'etcd (protocol lock-api)',
  lockDelay: false,
  modes: false,
  fifo: false,
  async start() {
    const cluster = await EtcdCluster.start(1);
    const port = Number(new URL(cluster.hostOf(0)).port);
    const proxy = await TcpProxy.start(port);
    return {
      direct: { backend: { type: 'etcd', hosts: cluster.hosts, protocol: 'lock-api' }, address: `127.0.0.1:${port}` },
      proxied: { backend: { type: 'etcd', hosts: [`http://${proxy.address}`], protocol: 'lock-api' }, address: proxy.address },
      faults: memberFaults(cluster, proxy),
      async stop() {
        await proxy.stop();
        await cluster.stop();
      },
    };
  },
});
