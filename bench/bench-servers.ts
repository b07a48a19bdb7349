import { Redis } from 'ioredis';
import type { BackendOptions } from '../lib';
import { EtcdCluster } from '../servers/etcd-server';
import { commandsExecuted, startRedisServer } from '../servers/redis-server';
import { packetsReceived, startZooKeeperServer, transactionCount } from '../servers/zookeeper-server';

/** A running total the server keeps, read before and after a measurement. */
export interface ServerCounter {
  readonly unit: string;
  read(): Promise<number>;
}

/** A throwaway server of one backend, and what it counts. */
export interface BenchServer {
  readonly name: 'redis' | 'etcd' | 'zookeeper';
  readonly backend: BackendOptions;
  /** Requests received: Redis script calls (not the commands they run inside), etcd gRPC messages, ZooKeeper packets. */
  readonly requests: ServerCounter;
  /** Writes made: Redis commands executed (a script and each command inside it), etcd raft proposals, ZooKeeper transactions. */
  readonly writes: ServerCounter;
}

/**
 * Runs `measure` against a fresh Redis, etcd and ZooKeeper server in turn, each stopped before
 * the next starts, so one backend's measurement never shares the machine with another's server.
 */
export async function forEachServer(measure: (server: BenchServer) => Promise<void>): Promise<void> {
  const redis = await startRedisServer();
  const admin = new Redis(redis.url);
  try {
    const executed = () => commandsExecuted((section) => admin.info(section));
    await measure({
      name: 'redis',
      backend: { type: 'redis', url: redis.url },
      requests: {
        unit: 'script calls',
        read: async () => {
          const { byCommand } = await executed();
          return (byCommand.evalsha ?? 0) + (byCommand.eval ?? 0) + (byCommand.ping ?? 0);
        },
      },
      writes: { unit: 'commands', read: async () => (await executed()).total },
    });
  } finally {
    admin.disconnect();
    await redis.stop();
  }
  const etcd = await EtcdCluster.start(1);
  try {
    const metrics = async () => (await fetch(`${etcd.hosts[0]}/metrics`)).text();
    await measure({
      name: 'etcd',
      backend: { type: 'etcd', hosts: etcd.hosts },
      requests: { unit: 'gRPC messages', read: async () => (await etcd.messagesReceived()).total },
      writes: { unit: 'raft proposals', read: async () => Number(/^etcd_server_proposals_committed_total (\S+)$/m.exec(await metrics())?.[1] ?? NaN) },
    });
  } finally {
    await etcd.stop();
  }
  const zookeeper = await startZooKeeperServer();
  try {
    await measure({
      name: 'zookeeper',
      backend: { type: 'zookeeper', connectionString: zookeeper.connectionString },
      requests: { unit: 'packets', read: () => packetsReceived(zookeeper.port) },
      writes: { unit: 'transactions', read: () => transactionCount(zookeeper.port) },
    });
  } finally {
    await zookeeper.stop();
  }
}
