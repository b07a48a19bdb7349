import { Etcd3, EtcdLockFailedError } from 'etcd3';
import { createEtcdBackend } from '../lib/backends/etcd/etcd.backend';
import { createEtcdLockApiBackend } from '../lib/backends/etcd/lock-api/etcd-lock-api.backend';
import { EtcdCluster } from '../servers/etcd-server';
import { lockServiceOver } from './lock-services';
import { printFlashSale } from './report';
import { formatRatio, median, pairedRatio } from './stats';
import { cyclesMs, flashSale, interleavedCycles, medianFlashSale, type FlashSaleResult, type LockRunner, SALE_BUYERS_PER_CONNECTION, SALE_CONNECTIONS, SALE_STOCK } from './workloads';
import { recordFigure, recordTarget } from './summary';

/** The peer's retry interval: what a user of a try-lock writes. */
const RETRY_MS = 10;
const CYCLE_ROUNDS = 15;
const CYCLES_PER_ROUND = 200;
const SALE_REPEATS = 5;
/** Acquisitions of one name before its cycle is compared with a fresh name's (see busyNameRatio). */
const HISTORY_CYCLES = 3000;
const HISTORY_ROUNDS = 6;
const HISTORY_CYCLES_PER_ROUND = 50;

/**
 * This library against the etcd3 package's own `Lock` on one throwaway etcd, in one run. The
 * etcd3 Lock is a try-lock (grant a lease, put if absent, revoke the lease on failure or
 * release), so its users retry it in a loop.
 */
export async function run(): Promise<void> {
  const cluster = await EtcdCluster.start(1);
  const services = Array.from({ length: SALE_CONNECTIONS }, () => lockServiceOver(createEtcdBackend({ type: 'etcd', hosts: cluster.hosts })));
  const lockApiServices = Array.from({ length: SALE_CONNECTIONS }, () => lockServiceOver(createEtcdLockApiBackend({ type: 'etcd', hosts: cluster.hosts, protocol: 'lock-api' })));
  const peers = Array.from({ length: SALE_CONNECTIONS }, () => new Etcd3({ hosts: cluster.hosts }));
  try {
    const runnersOf = (over: typeof services): LockRunner[] => over.map((service) => (name, section) => service.withLock(name, section, { waitTimeoutMs: 120_000 }));
    const ours = runnersOf(services);
    const lockApi = runnersOf(lockApiServices);
    const theirs: LockRunner[] = peers.map((client) => (name, section) => etcd3LockRun(client, name, section));

    // Rounds in a shuffled order after a warm-up, so both see the same machine load; the cycle
    // time ratio is taken inside each round, then its median (see pairedRatio).
    const rounds = await interleavedCycles(new Map([['ours', ours[0]], ['lock-api', lockApi[0]], ['theirs', theirs[0]]]), CYCLE_ROUNDS, CYCLES_PER_ROUND);
    const ourCycles = median(rounds.get('ours')!);
    const theirCycles = median(rounds.get('theirs')!);
    console.log(`uncontended acquire+release, this library: ${Math.round(ourCycles)} cycles/s (${(1000 / ourCycles).toFixed(2)} ms/cycle)`);
    console.log(`uncontended acquire+release, etcd3 Lock:   ${Math.round(theirCycles)} cycles/s (${(1000 / theirCycles).toFixed(2)} ms/cycle)`);
    // Our cycle time over theirs is their cycles/s over ours.
    const cycleRatio = pairedRatio(rounds.get('theirs')!, rounds.get('ours')!);
    console.log(
      `cycle time ratio (ours / etcd3 Lock): ${cycleRatio.median.toFixed(2)}x, round by round (quartiles ` +
        `${cycleRatio.p25.toFixed(2)}-${cycleRatio.p75.toFixed(2)}; ratio of medians ${formatRatio(theirCycles, ourCycles)})`,
    );
    recordTarget('uncontended cycle time vs the etcd3 Lock', cycleRatio.median, '<=', 0.75);
    const lockApiCycles = median(rounds.get('lock-api')!);
    const lockApiRatio = pairedRatio(rounds.get('ours')!, rounds.get('lock-api')!);
    console.log(`uncontended acquire+release, protocol 'lock-api': ${Math.round(lockApiCycles)} cycles/s (${(1000 / lockApiCycles).toFixed(2)} ms/cycle)`);
    console.log(
      `cycle time ratio ('lock-api' / default layout): ${lockApiRatio.median.toFixed(2)}x, round by round (quartiles ` +
        `${lockApiRatio.p25.toFixed(2)}-${lockApiRatio.p75.toFixed(2)}; ratio of medians ${formatRatio(ourCycles, lockApiCycles)})`,
    );
    recordTarget("protocol 'lock-api' uncontended cycle time vs the default layout", lockApiRatio.median, '<=', 1.3);
    const busy = await busyNameRatio(ours[0]);
    console.log(`uncontended cycle on a name acquired ${HISTORY_CYCLES} times before vs on a fresh name, this library: ${busy.toFixed(2)}x (median of ${HISTORY_ROUNDS} rounds)`);
    recordFigure(`uncontended cycle on a name with ${HISTORY_CYCLES} past acquisitions vs a fresh name's`, `${busy.toFixed(2)}x`);

    // Alternate the two libraries' sales too; each keeps its median-makespan run.
    const ourSales: FlashSaleResult[] = [];
    const lockApiSales: FlashSaleResult[] = [];
    const theirSales: FlashSaleResult[] = [];
    // One unmeasured sale each first: the contended code paths are not warm (JIT) yet.
    await flashSale(ours, SALE_BUYERS_PER_CONNECTION, SALE_STOCK);
    await flashSale(lockApi, SALE_BUYERS_PER_CONNECTION, SALE_STOCK);
    await flashSale(theirs, SALE_BUYERS_PER_CONNECTION, SALE_STOCK);
    for (let round = 0; round < SALE_REPEATS; round++) {
      ourSales.push(await flashSale(ours, SALE_BUYERS_PER_CONNECTION, SALE_STOCK));
      lockApiSales.push(await flashSale(lockApi, SALE_BUYERS_PER_CONNECTION, SALE_STOCK));
      theirSales.push(await flashSale(theirs, SALE_BUYERS_PER_CONNECTION, SALE_STOCK));
    }
    const ourSale = await medianFlashSale(ourSales.length, async () => ourSales.shift()!);
    const lockApiSale = await medianFlashSale(lockApiSales.length, async () => lockApiSales.shift()!);
    const theirSale = await medianFlashSale(theirSales.length, async () => theirSales.shift()!);
    printFlashSale(`this library (etcd, ${SALE_CONNECTIONS} x ${SALE_BUYERS_PER_CONNECTION})`, ourSale);
    printFlashSale(`this library (etcd, protocol 'lock-api', ${SALE_CONNECTIONS} x ${SALE_BUYERS_PER_CONNECTION})`, lockApiSale);
    printFlashSale(`etcd3 Lock + ${RETRY_MS} ms retry (${SALE_CONNECTIONS} x ${SALE_BUYERS_PER_CONNECTION})`, theirSale);
    const saleRatio = ourSale.makespanMs / theirSale.makespanMs;
    recordTarget('flash-sale makespan vs the etcd3 Lock', saleRatio, '<=', 0.03);
    console.log(`flash-sale makespan ratio ('lock-api' / default layout): ${(lockApiSale.makespanMs / ourSale.makespanMs).toFixed(2)}x`);
    recordTarget("protocol 'lock-api' flash-sale makespan vs the etcd3 Lock", lockApiSale.makespanMs / theirSale.makespanMs, '<=', 0.05);
  } finally {
    await Promise.all([...services, ...lockApiServices].map((service) => service.onApplicationShutdown()));
    for (const client of peers) client.close();
    await cluster.stop();
  }
}

/**
 * A busy name's cycle time over a fresh name's, round by round: etcd keeps each deleted key in its
 * index until compaction, and a range over the name reads through them, so a lock whose keys got a
 * new name per acquisition slowed down with its name's history (docs/etcd.md).
 */
async function busyNameRatio(run: LockRunner): Promise<number> {
  const busy = `bench-busy-${process.pid}-${Date.now()}`;
  await cyclesMs(run, busy, HISTORY_CYCLES);
  const ratios: number[] = [];
  for (let round = 0; round < HISTORY_ROUNDS; round++) {
    ratios.push((await cyclesMs(run, busy, HISTORY_CYCLES_PER_ROUND)) / (await cyclesMs(run, `${busy}-fresh-${round}`, HISTORY_CYCLES_PER_ROUND)));
  }
  return median(ratios);
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
