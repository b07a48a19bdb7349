import { EtcdCluster } from '../../servers/etcd-server';
import type { ServerFaults } from '../support/server-faults';
import { TcpProxy } from '../support/tcp-proxy';
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

function memberFaults(cluster: EtcdCluster, proxy: TcpProxy): ServerFaults {
  return {
    kill: () => cluster.kill(0),
    start: async () => {
      await cluster.revive(0);
      await cluster.waitHealthy(20_000);
    },
    pause: () => cluster.pause(0),
    resume: () => cluster.resume(0),
    blackHole: () => proxy.blackHole(),
    heal: () => proxy.heal(),
    async restore() {
      proxy.heal();
      await cluster.restore();
    },
  };
}
