import { createEtcdBackend } from '../../lib/backends/etcd/etcd.backend';
import { EtcdCluster } from '../../servers/etcd-server';
import { runLockContract } from './lock-backend.contract';

// The lock ttls of the contract are enforced by each holder's local deadline (it releases its
// key when the deadline passes), not by etcd's whole-second session lease (which follows the
// module's ttlMs, 30 s here): the defaults fit. etcd's own faults: test/backends/etcd/.
runLockContract({
  name: 'etcd',
  // A session lease is whole seconds, rounded up from ttlMs: what inspect reports as expiresInMs.
  leaseRoundingMs: 1_000,
  async start() {
    const cluster = await EtcdCluster.start(1);
    return {
      newClient: async () => createEtcdBackend({ type: 'etcd', hosts: cluster.hosts }),
      processBackend: { type: 'etcd', hosts: cluster.hosts },
      stop: () => cluster.stop(),
    };
  },
});
