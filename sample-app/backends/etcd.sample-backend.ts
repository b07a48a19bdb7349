import { EtcdCluster } from '../../servers/etcd-server';
import { EtcdStockStore } from '../inventory/etcd-stock.store';
import type { Connection, SampleBackend } from './sample-backend';

const hostsOf = (connection: Connection) => connection.hosts.split(',');

/**
 * etcd for both the lock and the stock: ETCD_HOSTS (comma-separated client URLs) if set, else a
 * throwaway single-member etcd. `sessionTtlMs` in the connection, when present, sets the
 * backend's session lease (the fault tests shorten it).
 */
export const etcdSampleBackend: SampleBackend = {
  multiProcess: true,
  async provision() {
    if (process.env.ETCD_HOSTS) return { connection: { hosts: process.env.ETCD_HOSTS }, stop: async () => undefined };
    const cluster = await EtcdCluster.start(1);
    return { connection: { hosts: cluster.hosts.join(',') }, stop: () => cluster.stop() };
  },
  lockBackend: (connection) => ({
    type: 'etcd',
    hosts: hostsOf(connection),
    ...(connection.sessionTtlMs ? { sessionTtlMs: Number(connection.sessionTtlMs) } : {}),
  }),
  stockStore: async (connection) => new EtcdStockStore(hostsOf(connection)),
};
