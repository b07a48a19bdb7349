import { Etcd3, EtcdLockFailedError } from 'etcd3';
import { createEtcdBackend } from '../lib/backends/etcd/etcd.backend';
import { EtcdCluster } from '../test/support/etcd-server';
import { lockServiceOver } from '../test/support/lock-service-factory';
import { printFlashSale } from './report';
import { formatRatio, median } from './stats';
import { flashSale, medianFlashSale, uncontendedCycles, type FlashSaleResult, type LockRunner } from './workloads';

const CONNECTIONS = 4;
const BUYERS_PER_CONNECTION = 50;
const STOCK = 150;
/** The peer's retry interval: what a user of a try-lock writes. */
const RETRY_MS = 10;

/**
 * This library against the etcd3 package's own `Lock` on one throwaway etcd, in one run. The
 * etcd3 Lock is a try-lock (grant a lease, put if absent, revoke the lease on failure or
 * release), so its users retry it in a loop.
 */
export async function run(): Promise<void> {
  const cluster = await EtcdCluster.start(1);
  const services = Array.from({ length: CONNECTIONS }, () => lockServiceOver(createEtcdBackend({ type: 'etcd', hosts: cluster.hosts })));
  const peers = Array.from({ length: CONNECTIONS }, () => new Etcd3({ hosts: cluster.hosts }));
  try {
    const ours: LockRunner[] = services.map((service) => (name, section) => service.withLock(name, section, { waitTimeoutMs: 120_000 }));
    const theirs: LockRunner[] = peers.map((client) => (name, section) => etcd3LockRun(client, name, section));

    // Warm both up (JIT, connections), then alternate rounds so both see the same machine load.
    await uncontendedCycles(ours[0], 1, 100);
    await uncontendedCycles(theirs[0], 1, 100);
    const ourRounds: number[] = [];
    const theirRounds: number[] = [];
    for (let round = 0; round < 7; round++) {
      ourRounds.push((await uncontendedCycles(ours[0], 1, 300)).cyclesPerSecond);
      theirRounds.push((await uncontendedCycles(theirs[0], 1, 300)).cyclesPerSecond);
    }
    const ourCycles = { cyclesPerSecond: median(ourRounds), cycleMs: 1000 / median(ourRounds) };
    const theirCycles = { cyclesPerSecond: median(theirRounds), cycleMs: 1000 / median(theirRounds) };
    console.log(`uncontended acquire+release, this library: ${Math.round(ourCycles.cyclesPerSecond)} cycles/s (${ourCycles.cycleMs.toFixed(2)} ms/cycle)`);
    console.log(`uncontended acquire+release, etcd3 Lock:   ${Math.round(theirCycles.cyclesPerSecond)} cycles/s (${theirCycles.cycleMs.toFixed(2)} ms/cycle)`);
    const cycleRatio = ourCycles.cycleMs / theirCycles.cycleMs;
    console.log(`cycle time ratio (ours / etcd3 Lock): ${formatRatio(ourCycles.cycleMs, theirCycles.cycleMs)} (target <= 0.75: ${cycleRatio <= 0.75 ? 'met' : 'MISSED'})`);

    // Alternate the two libraries' sales too; each keeps its median-makespan run.
    const ourSales: FlashSaleResult[] = [];
    const theirSales: FlashSaleResult[] = [];
    // One unmeasured sale each first: the contended code paths are not warm (JIT) yet.
    await flashSale(ours, BUYERS_PER_CONNECTION, STOCK);
    await flashSale(theirs, BUYERS_PER_CONNECTION, STOCK);
    for (let round = 0; round < 3; round++) {
      ourSales.push(await flashSale(ours, BUYERS_PER_CONNECTION, STOCK));
      theirSales.push(await flashSale(theirs, BUYERS_PER_CONNECTION, STOCK));
    }
    const ourSale = await medianFlashSale(ourSales.length, async () => ourSales.shift()!);
    const theirSale = await medianFlashSale(theirSales.length, async () => theirSales.shift()!);
    printFlashSale(`this library (etcd, ${CONNECTIONS} x ${BUYERS_PER_CONNECTION})`, ourSale);
    printFlashSale(`etcd3 Lock + ${RETRY_MS} ms retry (${CONNECTIONS} x ${BUYERS_PER_CONNECTION})`, theirSale);
    const saleRatio = ourSale.makespanMs / theirSale.makespanMs;
    console.log(
      `makespan ratio (ours / etcd3 Lock): ${saleRatio.toFixed(3)}x ` +
        `(target <= 0.05: ${saleRatio <= 0.05 ? 'met' : 'MISSED'})`,
    );
  } finally {
    await Promise.all(services.map((service) => service.onApplicationShutdown()));
    for (const client of peers) client.close();
    await cluster.stop();
  }
}

/** The etcd3 Lock as its users drive it: try, and on "locked" sleep RETRY_MS and try again. */
async function etcd3LockRun(client: Etcd3, name: string, section: () => void | Promise<void>): Promise<void> {
  for (;;) {
    const lock = client.lock(name).ttl(10);
    try {
      await lock.acquire();
    } catch (error) {
      if (!(error instanceof EtcdLockFailedError)) throw error;
      await new Promise((resolve) => setTimeout(resolve, RETRY_MS));
      continue;
    }
    try {
      await section();
    } finally {
      await lock.release();
    }
    return;
  }
}
