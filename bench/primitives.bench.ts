import { Redis } from 'ioredis';
import { Semaphore } from 'redis-semaphore';
import { MemoryLockBackend, MemoryLockStore, type BackendOptions, type LockBackend, type LockService } from '../lib';
import { createBackend } from '../lib/backends/registry';
import { EtcdCluster } from '../servers/etcd-server';
import { startRedisServer } from '../servers/redis-server';
import { lockServiceOver } from './lock-services';
import { progress } from './progress';
import { median, pairedTimeRatio } from './stats';
import { recordFigure, recordTarget } from './summary';
import { interleavedCycles, type LockRunner } from './workloads';
import { idealReadHeavyRatio } from './ideal-read-write';

const READ_HEAVY_CLIENTS = 4;
const READ_HEAVY_CALLERS_PER_CLIENT = 4;
const READ_HEAVY_CALLS_PER_CALLER = 25;
const READ_SHARE = 0.9;
const SECTION_MS = 2;
const READ_HEAVY_ROUNDS = 5;

const SEMAPHORE_LIMIT = 5;
const SEMAPHORE_CALLERS = 50;
const SEMAPHORE_SECTION_MS = 5;
const SEMAPHORE_ROUNDS = 5;

const TWO_NAME_ROUNDS = 15;
const TWO_NAME_CYCLES = 300;

const pause = (ms: number) => new Promise<void>((resolve) => setTimeout(resolve, ms));

/**
 * The new primitives against what a user would otherwise do, on one throwaway server per
 * backend: a read-heavy workload with the read lock against the same workload all in write mode
 * (Redis and etcd), a semaphore against redis-semaphore's (which polls), and a lock of two names
 * against a lock of one (Redis).
 */
export async function run(): Promise<void> {
  const redis = await startRedisServer();
  const etcd = await EtcdCluster.start(1);
  const clients: Redis[] = [];
  try {
    // Zero-cost grants: the most the FIFO rule allows this workload, whatever the implementation.
    const ideal = idealReadHeavyRatio(READ_HEAVY_CLIENTS, READ_HEAVY_CALLERS_PER_CLIENT, READ_HEAVY_CALLS_PER_CALLER, Math.round(1 / (1 - READ_SHARE)), SECTION_MS);
    console.log(`read-heavy on an ideal FIFO read-write lock (zero-cost grants, simulated): ${ideal.toFixed(2)}x the all-write throughput`);
    recordFigure('read-heavy throughput with read locks vs every call in write mode (an ideal FIFO lock, simulated)', `${ideal.toFixed(2)}x`);
    // The embedded backend has no network: what this library's FIFO read-write lock allows the workload.
    const store = new MemoryLockStore();
    const floor = await readHeavy('memory (the floor: no network)', async () => new MemoryLockBackend(store));
    await readHeavy('redis', () => createBackend({ type: 'redis', url: redis.url }), floor);
    await readHeavy('etcd', () => createBackend({ type: 'etcd', hosts: etcd.hosts }), floor);
    const ioredis = () => {
      const client = new Redis(redis.url);
      clients.push(client);
      return client;
    };
    await semaphoreMakespan({ type: 'redis', url: redis.url }, ioredis);
    await twoNames({ type: 'redis', url: redis.url });
  } finally {
    for (const client of clients) client.disconnect();
    await etcd.stop();
    await redis.stop();
  }
}

/** Services over `backend`, one client each, as several processes would have. */
async function servicesOver(backend: BackendOptions | (() => Promise<LockBackend>), count: number): Promise<LockService[]> {
  const newClient = typeof backend === 'function' ? backend : () => createBackend(backend);
  return Promise.all(Array.from({ length: count }, async () => lockServiceOver(await newClient())));
}

async function closeAll(services: LockService[]): Promise<void> {
  await Promise.all(services.map((service) => service.onApplicationShutdown()));
}

/**
 * 16 callers over 4 clients, each making 25 calls of which 90% read (a 2 ms section), on one
 * name; the same calls with every one in write mode. Rounds alternate the two, and the ratio of
 * their throughputs is taken inside each round. Returns the median ratio; with `floor` (the
 * embedded backend's), the target is checked and the ratio shown against the floor's.
 */
async function readHeavy(label: string, backend: () => Promise<LockBackend>, floor?: number): Promise<number> {
  const services = await servicesOver(backend, READ_HEAVY_CLIENTS);
  try {
    const workload = async (readMode: boolean): Promise<number> => {
      const name = `bench-read-heavy-${process.pid}-${Date.now()}-${readMode}`;
      const started = performance.now();
      let calls = 0;
      await Promise.all(
        services.flatMap((service) =>
          Array.from({ length: READ_HEAVY_CALLERS_PER_CLIENT }, async (_, caller) => {
            for (let i = 0; i < READ_HEAVY_CALLS_PER_CALLER; i++) {
              // The same sequence of reads and writes in both runs: every tenth call writes.
              const read = (i + caller) % Math.round(1 / (1 - READ_SHARE)) !== 0;
              await service.withLock(name, () => pause(SECTION_MS), { mode: read && readMode ? 'read' : 'write', waitTimeoutMs: 120_000 });
              calls++;
            }
          }),
        ),
      );
      return calls / ((performance.now() - started) / 1000);
    };
    await workload(true);
    const ratios: number[] = [];
    const rates: { read: number[]; write: number[] } = { read: [], write: [] };
    for (let round = 0; round < READ_HEAVY_ROUNDS; round++) {
      const [first, second] = round % 2 === 0 ? [true, false] : [false, true];
      const a = await workload(first);
      const b = await workload(second);
      const [read, write] = first ? [a, b] : [b, a];
      rates.read.push(read);
      rates.write.push(write);
      ratios.push(read / write);
      progress(`read-heavy ${label}`, round + 1, READ_HEAVY_ROUNDS);
    }
    console.log(
      `read-heavy on ${label} (${READ_HEAVY_CLIENTS} clients x ${READ_HEAVY_CALLERS_PER_CLIENT} callers, ${READ_SHARE * 100}% reads, ${SECTION_MS} ms sections): ` +
        `${Math.round(median(rates.read))} calls/s with read locks, ${Math.round(median(rates.write))} calls/s all in write mode`,
    );
    if (floor === undefined) recordFigure(`read-heavy throughput with read locks vs every call in write mode (${label})`, `${median(ratios).toFixed(2)}x`);
    else recordTarget(`read-heavy throughput with read locks vs every call in write mode (${label}; the floor's ${floor.toFixed(2)}x)`, median(ratios), '>=', 5);
    return median(ratios);
  } finally {
    await closeAll(services);
  }
}

/** 50 callers over 5 clients arrive at once at a semaphore of 5 with a 5 ms section: the makespan, ours and redis-semaphore's. */
async function semaphoreMakespan(backend: BackendOptions, ioredis: () => Redis): Promise<void> {
  const clients = 5;
  const services = await servicesOver(backend, clients);
  const peerClients = Array.from({ length: clients }, ioredis);
  try {
    const ours = (name: string, index: number) => services[index % clients].withSemaphore(name, SEMAPHORE_LIMIT, () => pause(SEMAPHORE_SECTION_MS), { waitTimeoutMs: 60_000 });
    const theirs = async (name: string, index: number) => {
      const semaphore = new Semaphore(peerClients[index % clients], name, SEMAPHORE_LIMIT, { lockTimeout: 10_000, acquireTimeout: 60_000 });
      await semaphore.acquire();
      try {
        await pause(SEMAPHORE_SECTION_MS);
      } finally {
        await semaphore.release();
      }
    };
    const makespan = async (take: (name: string, index: number) => Promise<unknown>) => {
      const name = `bench-semaphore-${process.pid}-${Date.now()}-${Math.random()}`;
      const started = performance.now();
      await Promise.all(Array.from({ length: SEMAPHORE_CALLERS }, (_, i) => take(name, i)));
      return performance.now() - started;
    };
    await makespan(ours);
    await makespan(theirs);
    const ratios: number[] = [];
    const times: { ours: number[]; theirs: number[] } = { ours: [], theirs: [] };
    for (let round = 0; round < SEMAPHORE_ROUNDS; round++) {
      const a = await makespan(ours);
      const b = await makespan(theirs);
      times.ours.push(a);
      times.theirs.push(b);
      ratios.push(a / b);
      progress('semaphore', round + 1, SEMAPHORE_ROUNDS);
    }
    const floorMs = (SEMAPHORE_CALLERS / SEMAPHORE_LIMIT) * SEMAPHORE_SECTION_MS;
    console.log(
      `semaphore of ${SEMAPHORE_LIMIT}, ${SEMAPHORE_CALLERS} callers at once, ${SEMAPHORE_SECTION_MS} ms sections (floor ${floorMs} ms): ` +
        `makespan ${Math.round(median(times.ours))} ms, redis-semaphore's Semaphore (retryInterval 10: default) ${Math.round(median(times.theirs))} ms`,
    );
    recordTarget("semaphore makespan vs redis-semaphore's Semaphore (redis)", median(ratios), '<=', 0.2);
    recordFigure('semaphore makespan, this library / its floor (redis)', `${(median(times.ours) / floorMs).toFixed(2)}x`);
    // The sections alone take floorMs: no implementation's ratio can be below this one.
    recordFigure("semaphore makespan, its floor / redis-semaphore's Semaphore (the lowest ratio possible)", `${(floorMs / median(times.theirs)).toFixed(2)}x`);
  } finally {
    await closeAll(services);
  }
}

/** A free two-name lock's cycle against a free one-name lock's, uncontended, round by round. */
async function twoNames(backend: BackendOptions): Promise<void> {
  const [service] = await servicesOver(backend, 1);
  try {
    const one: LockRunner = (name, section) => service.withLock(name, section, { ttlMs: 10_000 });
    const two: LockRunner = (name, section) => service.withLock([name, `${name}:second`], section, { ttlMs: 10_000 });
    const rounds = await interleavedCycles(
      new Map([
        ['one', one],
        ['two', two],
      ]),
      TWO_NAME_ROUNDS,
      TWO_NAME_CYCLES,
    );
    const ratio = pairedTimeRatio(rounds.get('two')!, rounds.get('one')!);
    console.log(`uncontended: one name ${Math.round(median(rounds.get('one')!))} cycles/s, two names ${Math.round(median(rounds.get('two')!))} cycles/s`);
    recordTarget("two-name lock's uncontended cycle vs one name's (redis)", ratio, '<=', 1.3);
  } finally {
    await closeAll([service]);
  }
}
