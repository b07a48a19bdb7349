import type { EtcdCluster } from '../../servers/etcd-server';
import type { ServerFaults } from '../support/server-faults';
import type { TcpProxy } from '../support/tcp-proxy';

/** The failure contract's faults on a one-member etcd: its process for kill and pause, the proxy for a black hole. */
export function memberFaults(cluster: EtcdCluster, proxy: TcpProxy): ServerFaults {
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
