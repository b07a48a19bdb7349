import { setTimeout as sleep } from 'node:timers/promises';
import { createClient, CreateMode, type Client } from 'node-zookeeper-client';
import { call } from './zookeeper-call';
import type { LockBackend, LockService } from '../lib';
import { createZooKeeperBackend } from '../lib/backends/zookeeper/create-zookeeper-backend';
import { ClientTraffic, clientOf, isKeepAlive, watchedPaths } from '../test/backends/zookeeper/zookeeper-client-probe';
import { lockServiceOver } from './lock-services';
import { startZooKeeperServer } from '../servers/zookeeper-server';
import { processCpuUs } from '../servers/proc-stat';
import { printFlashSale } from './report';
import { addedToPath, criticalPath, type TimedSocket } from './critical-path';
import { cpuPerCycle } from './cpu-per-cycle';
import { curatorRecipeLock } from './curator-recipe-lock';
import { leanZooKeeperLock } from './lean-zookeeper-lock';
import { formatRatio, median, pairedRatio, percentile } from './stats';
import { flashSale, interleavedCycles, medianFlashSale, type FlashSaleResult, type LockRunner, SALE_BUYERS_PER_CONNECTION, SALE_CONNECTIONS, SALE_STOCK, WARMUP_CYCLES } from './workloads';
import { recordFigure, recordTarget } from './summary';

const CYCLE_ROUNDS = 15;
const CYCLES_PER_ROUND = 200;
/** The lean lock's lease: any length far above a cycle's does. */
const LEASE_MS = 10_000;
/** Hand-offs between two clients, each time to a waiter directly behind the holder. */
const PAIR_HAND_OFFS = 300;
/** Waiters per connection queued behind one holder, then handed the lock one after another. */
const QUEUED_PER_CONNECTION = 50;

/**
 * ZooKeeper: this library against a naive ephemeral-node try-lock with a retry loop (what a
 * user writes in ten lines with node-zookeeper-client: no queue, no fairness, no fencing) and a
 * lock written as Curator's recipe (curatorRecipeLock), on one throwaway standalone server. Round trips are measured, so costs can be stated in them.
 */
export async function run(): Promise<void> {
  const zookeeper = await startZooKeeperServer();
  const backends = Array.from({ length: SALE_CONNECTIONS }, () => createZooKeeperBackend({ type: 'zookeeper', connectionString: zookeeper.connectionString }));
  const services = backends.map((backend) => lockServiceOver(backend));
  const naiveClients = await Promise.all(Array.from({ length: SALE_CONNECTIONS }, () => connect(zookeeper.connectionString)));
  try {
    const ours: LockRunner[] = services.map((service) => (name, section) => service.withLock(name, section, { waitTimeoutMs: 120_000 }));
    const naive: LockRunner[] = naiveClients.map((client) => (name, section) => naiveLock(client, name, section));
    await call<string>((done) => naiveClients[0].mkdirp('/naive-locks', done));
    await call<string>((done) => naiveClients[0].mkdirp('/lean-locks', done));
    const curator = curatorRecipeLock(naiveClients[0], '/curator-recipe-locks');
    const readMs = await medianRoundTrip(() => call((done) => naiveClients[0].exists('/', done)));
    console.log(`round trip: read (exists) ${readMs.toFixed(3)} ms (median)`);

    // The naive lock's uncontended cycle is exactly two fsync'd writes (create, delete): measured
    // in the same rounds, it is the unit the other cycles are counted in.
    const runners = new Map<string, LockRunner>([
      ['ours', ours[0]],
      ['curator', curator],
      ['naive', naive[0]],
      ['writes', ourWritesAlone(naiveClients[0], '/naive-locks')],
      ['lean', leanZooKeeperLock(naiveClients[0], '/lean-locks', zookeeper.connectionString, LEASE_MS)],
    ]);
    const rounds = await interleavedCycles(runners, CYCLE_ROUNDS, CYCLES_PER_ROUND);
    const [oursRounds, curatorRounds, naiveRounds, writesRounds, leanRounds] = ['ours', 'curator', 'naive', 'writes', 'lean'].map((key) => rounds.get(key)!);
    const writeTrips = pairedRatio(naiveRounds.map((perSecond) => perSecond * 2), oursRounds);
    const writesAloneTrips = pairedRatio(naiveRounds.map((perSecond) => perSecond * 2), writesRounds);
    const leanTrips = pairedRatio(naiveRounds.map((perSecond) => perSecond * 2), leanRounds);
    const vsCurator = pairedRatio(curatorRounds, oursRounds);
    const vsNaive = pairedRatio(naiveRounds, oursRounds);
    const writeMs = 1000 / median(naiveRounds) / 2;
    console.log(`uncontended, ${CYCLE_ROUNDS} rounds x ${CYCLES_PER_ROUND} cycles in a shuffled order after ${WARMUP_CYCLES} of each; medians, ratios inside each round:`);
    for (const [label, perRound] of [
      ['this library', oursRounds],
      ["Curator's recipe (create sequential, list children, delete)", curatorRounds],
      ['naive try-lock (create, delete: two writes)', naiveRounds],
      ["floor: this library's two writes alone (create sequential + touch the parent in one multi, delete)", writesRounds],
      ["a lean lock over those two writes (bounds, lease deadline, session-end and lost signal, re-entrancy; no queue, no waiting)", leanRounds],
    ] as const) {
      console.log(`  ${label}: ${Math.round(median(perRound))} cycles/s (${(1000 / median(perRound)).toFixed(3)} ms)`);
    }
    console.log(
      `  this library: ${writeTrips.median.toFixed(2)} write round trips per cycle (quartiles ${writeTrips.p25.toFixed(2)}-${writeTrips.p75.toFixed(2)}); ` +
        `${vsCurator.median.toFixed(2)}x Curator's recipe (${vsCurator.p25.toFixed(2)}-${vsCurator.p75.toFixed(2)}); ${vsNaive.median.toFixed(2)}x the naive try-lock`,
    );
    console.log(`  this library's two writes alone: ${writesAloneTrips.median.toFixed(2)} write round trips (${writesAloneTrips.p25.toFixed(2)}-${writesAloneTrips.p75.toFixed(2)})`);
    console.log(`  the lean lock over them: ${leanTrips.median.toFixed(2)} write round trips (${leanTrips.p25.toFixed(2)}-${leanTrips.p75.toFixed(2)})`);
    recordTarget('uncontended cycle, in write round trips', writeTrips.median, '<=', 2.2, '');
    recordFigure("floor: the library's two writes alone, in write round trips", writesAloneTrips.median.toFixed(2));
    recordFigure('a lean lock over those two writes, in write round trips', leanTrips.median.toFixed(2));
    recordTarget("uncontended cycle time vs Curator's recipe", vsCurator.median, '<=', 1.1);
    await printCriticalPaths(ours[0], backends[0], runners.get('writes')!, runners.get('lean')!, naiveClients[0]);
    await printCpuPerCycle(runners, zookeeper.server.pid);

    for (const [where, handOff] of [
      ['a waiter directly behind the holder', await pairHandOffs(services.slice(0, 2), backends.slice(0, 2))],
      [`a queue of ${SALE_CONNECTIONS * QUEUED_PER_CONNECTION} waiters in ${SALE_CONNECTIONS} clients`, await queuedHandOffs(services, backends)],
    ] as const) {
      console.log(
        `hand-off to ${where}, release to grant: median ${handOff.medianMs.toFixed(3)} ms (p90 ${handOff.p90Ms.toFixed(3)}) = ` +
          `${(handOff.medianMs / writeMs).toFixed(2)} write round trips; requests sent per hand-off (every client): ${handOff.requests}`,
      );
    }

    const sale = await medianFlashSale(5, () => flashSale(ours, SALE_BUYERS_PER_CONNECTION, SALE_STOCK));
    printFlashSale('this library (zookeeper)', sale);
    assertInvariant('this library', sale);
    const naiveSale = await medianFlashSale(5, () => flashSale(naive, SALE_BUYERS_PER_CONNECTION, SALE_STOCK));
    printFlashSale('naive try-lock (retry 5-15 ms)', naiveSale);
    assertInvariant('naive try-lock', naiveSale);
    console.log(`  makespan ratio naive / this library: ${formatRatio(naiveSale.makespanMs, sale.makespanMs)}`);
    recordFigure('flash-sale makespan, this library / naive try-lock', formatRatio(sale.makespanMs, naiveSale.makespanMs));
  } finally {
    for (const client of naiveClients) client.close();
    await Promise.all(services.map((service) => service.onApplicationShutdown()));
    await zookeeper.stop();
  }
}

/**
 * Where the uncontended cycle's time goes, this library against its two writes alone and the lean
 * lock over them, on the same client library: each round trip, and this process's work between a
 * reply and its next request (the gap the write round trips above count in). `writesClient`
 * carries both the writes alone and the lean lock.
 */
async function printCriticalPaths(ours: LockRunner, backend: LockBackend, writesAlone: LockRunner, lean: LockRunner, writesClient: Client): Promise<void> {
  // node-zookeeper-client keeps its socket in a private field: a benchmark may look inside.
  const socketOf = (client: Client) => (client as unknown as { connectionManager: { socket: TimedSocket } }).connectionManager.socket;
  const paths = [
    { label: 'this library (zookeeper)', path: await criticalPath(ours, socketOf(clientOf(backend)), `bench-path-${process.pid}-ours`) },
    { label: 'its two writes alone', path: await criticalPath(writesAlone, socketOf(writesClient), `bench-path-${process.pid}-writes`) },
    { label: 'the lean lock over them', path: await criticalPath(lean, socketOf(writesClient), `bench-path-${process.pid}-lean`) },
  ];
  for (const { label, path } of paths) {
    console.log(
      `uncontended cycle's steps, ${label} (medians, us): create trip ${path.acquireTrip.toFixed(1)}, grant to delete ${path.grantToRelease.toFixed(1)}, ` +
        `delete trip ${path.releaseTrip.toFixed(1)}, deleted to next create ${path.releasedToNext.toFixed(1)}`,
    );
  }
  recordFigure("uncontended cycle's steps vs the two writes alone (us: trips / this process between them)", addedToPath(paths[0].path, paths[1].path));
  recordFigure("the lean lock's steps vs the two writes alone (us: trips / this process between them)", addedToPath(paths[2].path, paths[1].path));
}

/**
 * The CPU each uncontended cycle costs this process and the server, the library against its two
 * writes alone and the lean lock over them. On two shared cores the server's threads run beside
 * this process, so this process's work slows the round trips too, not only the steps between them.
 */
async function printCpuPerCycle(runners: ReadonlyMap<string, LockRunner>, serverPid: number): Promise<void> {
  const labels = new Map([
    ['ours', 'this library'],
    ['writes', 'its two writes alone'],
    ['lean', 'the lean lock over them'],
  ]);
  // 1,000 cycles a round: the server's CPU is read in 10 ms ticks.
  const cpu = await cpuPerCycle(new Map([...labels.keys()].map((key) => [key, runners.get(key)!])), async () => processCpuUs(serverPid), 7, 1000);
  for (const [key, { clientUs, serverUs }] of cpu) {
    console.log(`uncontended CPU per cycle, ${labels.get(key)}: ${clientUs.toFixed(1)} us in this process, ${serverUs.toFixed(1)} us in the server`);
  }
  const us = (key: string) => cpu.get(key)!.clientUs.toFixed(0);
  recordFigure('uncontended CPU per cycle in this process (us): the library / the lean lock / the two writes alone', `${us('ours')} / ${us('lean')} / ${us('writes')}`);
}

interface HandOffs {
  medianMs: number;
  p90Ms: number;
  /** Requests every client sent between a release and the next grant, per hand-off: `1.00 (delete 1.00, getChildren 0.00)`. */
  requests: string;
}

/**
 * The hand-off on its own, PAIR_HAND_OFFS times: the holder releases while the other client
 * waits directly behind it (both its watches set); from the release call to the grant, and the
 * requests both clients send in that window.
 */
async function pairHandOffs(services: LockService[], backends: LockBackend[]): Promise<HandOffs> {
  const name = `bench-hand-off-pair-${Date.now()}`;
  await openSessions(services);
  const traffic = backends.map((backend) => new ClientTraffic(clientOf(backend)));
  const sent = new Map<string, number>();
  const times: number[] = [];
  let holder = await services[0].acquire(name);
  for (let i = 1; i <= PAIR_HAND_OFFS; i++) {
    const next = i % 2;
    const waiting = services[next].acquire(name, { waitTimeoutMs: 10_000 });
    // Waiting in full: its own node and the holder's are watched.
    while (watchedPaths(clientOf(backends[next])).length < 2) await new Promise((resolve) => setImmediate(resolve));
    traffic.forEach((counter) => counter.reset());
    const releasedAt = performance.now();
    void holder.release();
    holder = await waiting;
    times.push(performance.now() - releasedAt);
    addCounts(sent, traffic);
  }
  await holder.release();
  return { medianMs: median(times), p90Ms: percentile(times, 90), requests: perHandOff(sent, PAIR_HAND_OFFS) };
}

/**
 * The hand-off inside a queue, as in a flash sale once every buyer has arrived: waiters of
 * every client queued behind one holder (most listed a long queue, so most watch a waiter, not
 * the holder), then the lock goes down the queue, each critical section empty; from one
 * holder's release (the end of its section) to the next one's grant.
 */
async function queuedHandOffs(services: LockService[], backends: LockBackend[]): Promise<HandOffs> {
  const name = `bench-hand-off-queue-${Date.now()}`;
  const waiters = services.length * QUEUED_PER_CONNECTION;
  await openSessions(services);
  const traffic = backends.map((backend) => new ClientTraffic(clientOf(backend)));
  const holder = await services[0].acquire(name);
  const enteredAt: number[] = [];
  const sent = new Map<string, number>();
  const enter = () => {
    enteredAt.push(performance.now());
    // The last grant ends the window: its holder's release hands nothing over.
    if (enteredAt.length < waiters) return;
    addCounts(sent, traffic);
  };
  const granted = services.flatMap((service) =>
    Array.from({ length: QUEUED_PER_CONNECTION }, () => service.withLock(name, enter, { waitTimeoutMs: 60_000 })),
  );
  // Queued, and done setting up: no client has sent anything for 100 ms.
  for (let quiet = 0, last = -1; quiet < 20; ) {
    await sleep(5);
    const total = traffic.reduce((sum, counter) => sum + counter.requestsSent, 0);
    quiet = total === last ? quiet + 1 : 0;
    last = total;
  }
  traffic.forEach((counter) => counter.reset());
  const releasedAt = performance.now();
  await holder.release();
  await Promise.all(granted);
  const times = enteredAt.map((at, i) => at - (i === 0 ? releasedAt : enteredAt[i - 1]));
  return { medianMs: median(times), p90Ms: percentile(times, 90), requests: perHandOff(sent, waiters) };
}

function addCounts(sent: Map<string, number>, traffic: ClientTraffic[]): void {
  for (const counter of traffic) for (const [operation, count] of counter.counts()) sent.set(operation, (sent.get(operation) ?? 0) + count);
}

/** Every service opens its session (the probes read its client). */
async function openSessions(services: LockService[]): Promise<void> {
  await Promise.all(services.map(async (service) => (await service.tryAcquire(`bench-warm-up-${Date.now()}`))?.release()));
}

/** `1.00 (delete 1.00, getChildren 0.98)`: keep-alives left out. */
function perHandOff(sent: Map<string, number>, handOffs: number): string {
  const shown = [...sent].filter(([operation]) => !isKeepAlive(operation));
  const total = shown.reduce((sum, [, count]) => sum + count, 0);
  return `${(total / handOffs).toFixed(2)} (${shown.map(([operation, count]) => `${operation} ${(count / handOffs).toFixed(2)}`).join(', ') || 'none'})`;
}

function assertInvariant(label: string, sale: FlashSaleResult): void {
  if (!sale.invariantHolds) throw new Error(`${label}: stock ${sale.stockLeft} + winners ${sale.winners} != ${sale.initialStock}, or oversold`);
}

/** The peer: create an ephemeral node; if it exists, sleep 5-15 ms and try again; delete it after. */
async function naiveLock(client: Client, name: string, section: () => void | Promise<void>): Promise<void> {
  const path = `/naive-locks/${encodeURIComponent(name)}`;
  for (;;) {
    try {
      await call<string>((done) => client.create(path, CreateMode.EPHEMERAL, done));
      break;
    } catch (error) {
      if ((error as { code?: number }).code !== -110) throw error;
      await new Promise((resolve) => setTimeout(resolve, 5 + Math.random() * 10));
    }
  }
  try {
    await section();
  } finally {
    await call<void>((done) => client.remove(path, -1, (error) => done(error, undefined)));
  }
}

/**
 * The writes of this library's uncontended cycle with nothing around them: the node created and
 * its parent touched in one multi (the parent's new mzxid is the node's czxid), then deleted.
 */
function ourWritesAlone(client: Client, parent: string): LockRunner {
  return async (_name, section) => {
    const results = await call<{ path?: string }[]>((done) =>
      client.transaction().create(`${parent}/_c_writes-lock-`, CreateMode.EPHEMERAL_SEQUENTIAL).setData(parent, null, -1).commit(done),
    );
    await section();
    await call<void>((done) => client.remove(results[0].path!, -1, (error) => done(error, undefined)));
  };
}

/** Median time of one round trip, after 50 warm-up calls. */
async function medianRoundTrip(once: () => Promise<unknown>): Promise<number> {
  const times: number[] = [];
  for (let i = 0; i < 300; i++) {
    const started = performance.now();
    await once();
    times.push(performance.now() - started);
  }
  return median(times.slice(50));
}

async function connect(connectionString: string): Promise<Client> {
  const client = createClient(connectionString, { sessionTimeout: 10_000, spinDelay: 100 });
  const connected = new Promise<void>((resolve) => client.once('connected', () => resolve()));
  client.connect();
  await connected;
  return client;
}
