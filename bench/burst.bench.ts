import { Redis } from 'ioredis';
import type { BackendOptions } from '../lib';
import { createBackend } from '../lib/backends/registry';
import { EtcdCluster } from '../servers/etcd-server';
import { lockServiceOver } from './lock-services';
import { commandsExecuted, startRedisServer } from '../servers/redis-server';
import { startZooKeeperServer, transactionCount } from '../servers/zookeeper-server';

const BURST = 1000;

/** What one burst cost the server, and what callers saw. */
interface BurstResult {
  errors: number;
  writes: number;
  makespanMs: number;
}

/**
 * Contract point 5: 1000 concurrent acquisitions in one process, of one name and of 1000 names,
 * each held for a moment. Counts the errors callers saw and the writes the server made: Redis
 * commands executed (scripts count once, and so do the commands they run), etcd raft proposals
 * committed, ZooKeeper transactions (zxid).
 */
export async function run(): Promise<void> {
  const redis = await startRedisServer();
  const admin = new Redis(redis.url);
  try {
    await report('redis', 'commands', { type: 'redis', url: redis.url }, async () => (await commandsExecuted((section) => admin.info(section))).total);
  } finally {
    admin.disconnect();
    await redis.stop();
  }
  const etcd = await EtcdCluster.start(1);
  try {
    const metrics = `${etcd.hosts[0]}/metrics`;
    await report('etcd', 'raft proposals', { type: 'etcd', hosts: etcd.hosts }, async () => {
      const text = await (await fetch(metrics)).text();
      return Number(/^etcd_server_proposals_committed_total (\S+)$/m.exec(text)?.[1] ?? NaN);
    });
  } finally {
    await etcd.stop();
  }
  const zookeeper = await startZooKeeperServer();
  try {
    await report('zookeeper', 'transactions', { type: 'zookeeper', connectionString: zookeeper.connectionString }, () => transactionCount(zookeeper.port));
  } finally {
    await zookeeper.stop();
  }
}

async function report(name: string, unit: string, backend: BackendOptions, writes: () => Promise<number>): Promise<void> {
  const service = lockServiceOver(await createBackend(backend));
  try {
    // Warm up: connect, open the session, load the scripts.
    await service.withLock('warm-up', () => undefined);
    const oneName = await burst(writes, (i) => service.withLock('burst', () => i));
    const manyNames = await burst(writes, (i) => service.withLock(`burst-${i}`, () => i));
    for (const [label, result] of [['one name', oneName], ['1000 names', manyNames]] as const) {
      console.log(
        `${name.padEnd(9)} ${BURST} callers, ${label.padEnd(10)}: ${result.errors} errors, ${result.writes} ${unit} ` +
          `(${(result.writes / BURST).toFixed(2)} per caller), makespan ${Math.round(result.makespanMs)} ms`,
      );
    }
  } finally {
    await service.onApplicationShutdown();
  }
}

async function burst(writes: () => Promise<number>, call: (i: number) => Promise<unknown>): Promise<BurstResult> {
  const before = await writes();
  const started = performance.now();
  const outcomes = await Promise.allSettled(Array.from({ length: BURST }, (_, i) => call(i)));
  const makespanMs = performance.now() - started;
  // Releases finish in the background of the last callers: let them land before counting.
  await new Promise((resolve) => setTimeout(resolve, 200));
  const errors = outcomes.filter((outcome) => outcome.status === 'rejected');
  if (errors.length > 0) console.log(`  first error: ${String((errors[0] as PromiseRejectedResult).reason)}`);
  return { errors: errors.length, writes: (await writes()) - before, makespanMs };
}
