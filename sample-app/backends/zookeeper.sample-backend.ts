import { startZooKeeperServer } from '../../servers/zookeeper-server';
import { ZooKeeperStockStore } from '../inventory/zookeeper-stock.store';
import type { SampleBackend } from './sample-backend';

/** ZooKeeper for both the lock and the stock: ZOOKEEPER_CONNECT if set, else a throwaway server. */
export const zookeeperSampleBackend: SampleBackend = {
  multiProcess: true,
  async provision() {
    if (process.env.ZOOKEEPER_CONNECT) return { connection: { connectionString: process.env.ZOOKEEPER_CONNECT }, stop: async () => undefined };
    const server = await startZooKeeperServer();
    return { connection: { connectionString: server.connectionString }, stop: () => server.stop() };
  },
  // sessionTimeoutMs is set by the fault tests (a killed holder is noticed after one session timeout).
  lockBackend: (connection) => ({
    type: 'zookeeper',
    connectionString: connection.connectionString,
    sessionTimeoutMs: connection.sessionTimeoutMs ? Number(connection.sessionTimeoutMs) : undefined,
  }),
  stockStore: (connection) => ZooKeeperStockStore.connect(connection.connectionString),
};
