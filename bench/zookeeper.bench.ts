import { createClient, CreateMode, type Client, type Exception } from 'node-zookeeper-client';
import { createZooKeeperBackend } from '../lib/backends/zookeeper/create-zookeeper-backend';
import { lockServiceOver } from '../test/support/lock-service-factory';
import { startZooKeeperServer } from '../test/support/zookeeper-server';
import { printFlashSale } from './report';
import { formatRatio, median } from './stats';
import { flashSale, medianFlashSale, uncontendedCycles, type LockRunner } from './workloads';

const CONNECTIONS = 4;
const BUYERS_PER_CONNECTION = 50;
const STOCK = 150;

/**
 * ZooKeeper: this library against a naive ephemeral-node try-lock with a retry loop (what a
 * user writes in ten lines with node-zookeeper-client: no queue, no fairness, no fencing), on
 * one throwaway standalone server. Round trips are measured, so costs can be stated in them.
 */
export async function run(): Promise<void> {
  const zookeeper = await startZooKeeperServer();
  const services = Array.from({ length: CONNECTIONS }, () =>
    lockServiceOver(createZooKeeperBackend({ type: 'zookeeper', connectionString: zookeeper.connectionString })),
  );
  const naiveClients = await Promise.all(Array.from({ length: CONNECTIONS }, () => connect(zookeeper.connectionString)));
  try {
    const ours: LockRunner[] = services.map((service) => (name, section) => service.withLock(name, section, { waitTimeoutMs: 120_000 }));
    const naive: LockRunner[] = naiveClients.map((client) => (name, section) => naiveLock(client, name, section));
    await call<string>((done) => naiveClients[0].mkdirp('/naive-locks', done));
    // The server's JIT (and ours) warm up over the first thousands of requests: warm both sides
    // before measuring either, or whichever runs second looks faster.
    await uncontendedCycles(ours[0], 3, 500);
    await uncontendedCycles(naive[0], 3, 500);
    const readMs = await medianRoundTrip(() => call((done) => naiveClients[0].exists('/', done)));
    const writeMs = await medianRoundTrip(async () => {
      await call<string>((done) => naiveClients[0].create('/bench-rtt', CreateMode.EPHEMERAL, done));
      await call<void>((done) => naiveClients[0].remove('/bench-rtt', -1, (error) => done(error, undefined)));
    }, 2);
    console.log(`round trip: read (exists) ${readMs.toFixed(3)} ms, write (create or delete, fsync'd) ${writeMs.toFixed(3)} ms (medians)`);

    const ourCycles = await uncontendedCycles(ours[0], 7, 300);
    console.log(
      `uncontended acquire+release, this library: ${Math.round(ourCycles.cyclesPerSecond)} cycles/s ` +
        `(${ourCycles.cycleMs.toFixed(2)} ms = ${(ourCycles.cycleMs / writeMs).toFixed(2)} write round trips)`,
    );
    const naiveCycles = await uncontendedCycles(naive[0], 7, 300);
    console.log(
      `uncontended acquire+release, naive try-lock: ${Math.round(naiveCycles.cyclesPerSecond)} cycles/s ` +
        `(${naiveCycles.cycleMs.toFixed(2)} ms); ratio ${formatRatio(ourCycles.cyclesPerSecond, naiveCycles.cyclesPerSecond)}`,
    );

    const sale = await medianFlashSale(5, () => flashSale(ours, BUYERS_PER_CONNECTION, STOCK));
    printFlashSale('this library (zookeeper)', sale);
    const perHandoffMs = sale.makespanMs / (CONNECTIONS * BUYERS_PER_CONNECTION);
    console.log(`  per critical section: ${perHandoffMs.toFixed(2)} ms = ${(perHandoffMs / writeMs).toFixed(2)} write round trips`);
    const naiveSale = await medianFlashSale(5, () => flashSale(naive, BUYERS_PER_CONNECTION, STOCK));
    printFlashSale('naive try-lock (retry 5-15 ms)', naiveSale);
    console.log(`  makespan ratio naive / this library: ${formatRatio(naiveSale.makespanMs, sale.makespanMs)}`);
  } finally {
    for (const client of naiveClients) client.close();
    await Promise.all(services.map((service) => service.onApplicationShutdown()));
    await zookeeper.stop();
  }
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

/** Median time of one round trip, after 50 warm-up calls. */
async function medianRoundTrip(once: () => Promise<unknown>, tripsPerCall = 1): Promise<number> {
  const times: number[] = [];
  for (let i = 0; i < 300; i++) {
    const started = performance.now();
    await once();
    times.push((performance.now() - started) / tripsPerCall);
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

function call<T>(start: (done: (error: Error | Exception | null, value: T) => void) => void): Promise<T> {
  return new Promise<T>((resolve, reject) => start((error, value) => (error ? reject(error) : resolve(value))));
}
