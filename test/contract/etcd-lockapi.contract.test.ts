import { createEtcdLockApiBackend } from '../../lib/backends/etcd/lock-api/etcd-lock-api.backend';
import { EtcdCluster } from '../../servers/etcd-server';
import { runLockContract } from './lock-backend.contract';

// etcd's Lock service grants the exclusive lock only (docs/etcd.md, "Protocol: lock-api"). Its
// queue is the server's concurrency.Mutex, in key create revision order, but a process has one key
// per name (`name/<lease hex>`): its callers that arrive while its key is out queue at the server
// only once that key is gone, behind other processes' later callers. So no FIFO across clients.
const backend = (hosts: string[]) => ({ type: 'etcd', hosts, protocol: 'lock-api' }) as const;

runLockContract({
  name: 'etcd (protocol lock-api)',
  modes: false,
  fifo: false,
  // A session lease is whole seconds, rounded up from ttlMs: what inspect reports as expiresInMs.
  leaseRoundingMs: 1_000,
  async start() {
    const cluster = await EtcdCluster.start(1);
    return {
      newClient: async () => createEtcdLockApiBackend(backend(cluster.hosts)),
      processBackend: backend(cluster.hosts),
      stop: () => cluster.stop(),
    };
  },
});
