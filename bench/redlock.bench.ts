import { Redlock as SesameRedlock } from '@sesamecare-oss/redlock';
import { Redis } from 'ioredis';
import Redlock from 'redlock';
import { RedlockMutex } from 'redis-semaphore';
import type { LockService } from '../lib';
import { createBackend } from '../lib/backends/registry';
import { quorum } from '../lib/backends/redlock/redlock-options';
import { acquireScript, redlockKeys, releaseScript } from '../lib/backends/redlock/redlock-scripts';
import type { RedisScript } from '../lib/backends/redis/redis-script';
import { beginLifeScript, LIFE_KEY } from '../lib/backends/redis/server-life-scripts';
import { RedisMasters } from '../servers/redis-masters';
import { lockServiceOver } from './lock-services';
import { printFlashSale } from './report';
import { formatRatio, median, pairedRatio, pairedTimeRatio } from './stats';
import { flashSale, interleavedCycles, medianFlashSale, type FlashSaleResult, type LockRunner, SALE_BUYERS_PER_CONNECTION, SALE_CONNECTIONS, SALE_STOCK, WARMUP_CYCLES } from './workloads';
import { recordFigure, recordTarget } from './summary';

const CYCLE_ROUNDS = 15;
const CYCLES_PER_ROUND = 200;
const SALE_REPEATS = 3;
const LEASE_MS = 10_000;
/** How long any buyer may wait: a peer whose retries split the vote for longer gives up, and the sale reports it. */
const WAIT_MS = 10_000;

interface Contender {
  label: string;
  runners: LockRunner[];
  /** Buyers whose call threw (retries ran out, or a release failed) in the sales measured so far, and the first error. */
  gaveUp: number;
  firstError?: string;
}

/** A runner whose failures are counted, not thrown: a sale then ends when every buyer bought or failed. */
function counting(contender: Contender, runner: LockRunner): LockRunner {
  return async (name, section) => {
    try {
      await runner(name, section);
    } catch (error) {
      contender.gaveUp++;
      contender.firstError ??= error instanceof Error ? `${error.name}: ${error.message}` : String(error);
    }
  };
}

/**
 * This backend against node-redlock v5 (defaults, and tuned to 10 ms retries), its maintained
 * fork @sesamecare-oss/redlock and redis-semaphore's RedlockMutex, on the same 3 and then 5
 * throwaway masters in one run. Each "connection" is a client of every master, as a process has.
 */
export async function run(): Promise<void> {
  for (const count of [3, 5]) await runOn(count);
}

async function runOn(count: number): Promise<void> {
  const masters = await RedisMasters.start(count);
  const clients: Redis[] = [];
  const services: LockService[] = [];
  const connectAll = () =>
    masters.urls.map((url) => {
      const client = new Redis(url);
      clients.push(client);
      return client;
    });
  const withRelease = (acquire: (name: string) => Promise<{ release(): Promise<unknown> }>): LockRunner => async (name, section) => {
    const lock = await acquire(name);
    try {
      await section();
    } finally {
      await lock.release();
    }
  };
  try {
    for (let i = 0; i < SALE_CONNECTIONS; i++) services.push(lockServiceOver(await createBackend({ type: 'redlock', urls: masters.urls })));
    const each = (make: () => LockRunner) => Array.from({ length: SALE_CONNECTIONS }, make);
    const listed: Omit<Contender, 'gaveUp'>[] = [
      { label: `this library (redlock, ${count} masters)`, runners: services.map((service): LockRunner => (name, section) => service.withLock(name, section, { waitTimeoutMs: WAIT_MS, ttlMs: LEASE_MS })) },
      ...[
        { delay: 200, jitter: 200, what: 'defaults' },
        { delay: 10, jitter: 10, what: 'tuned' },
      ].map(({ delay, jitter, what }) => ({
        label: `redlock v5 (retryDelay ${delay}, jitter ${jitter}: ${what})`,
        // Retries for up to WAIT_MS, as a sale needs (the default 10 tries give up after ~2 s).
        runners: each(() => {
          const redlock = new Redlock(connectAll(), { retryCount: Math.ceil(WAIT_MS / delay), retryDelay: delay, retryJitter: jitter });
          return withRelease((name) => redlock.acquire([name], LEASE_MS));
        }),
      })),
      {
        label: '@sesamecare-oss/redlock (tuned: retryDelay 10, jitter 10)',
        runners: each(() => {
          const redlock = new SesameRedlock(connectAll(), { retryCount: Math.ceil(WAIT_MS / 10), retryDelay: 10, retryJitter: 10 });
          return withRelease((name) => redlock.acquire([name], LEASE_MS));
        }),
      },
      {
        label: 'redis-semaphore RedlockMutex (retryInterval 10: default)',
        runners: each(() => {
          const redises = connectAll();
          return withRelease(async (name) => {
            const mutex = new RedlockMutex(redises, name, { lockTimeout: LEASE_MS, acquireTimeout: WAIT_MS });
            await mutex.acquire();
            return mutex;
          });
        }),
      },
    ];
    const contenders: Contender[] = listed.map((each) => {
      const contender: Contender = { ...each, gaveUp: 0 };
      contender.runners = each.runners.map((runner) => counting(contender, runner));
      return contender;
    });

    // Not a contender (it cannot wait, so it sits out the sales): what this library's scripts cost with no library around them.
    const floor: Contender = { label: "floor: this library's acquire and release scripts alone, to every master (plain clients, no library)", runners: [scriptsAlone(connectAll())], gaveUp: 0 };
    console.log(`${count} masters ${masters.addresses.join(', ')}; uncontended: ${CYCLE_ROUNDS} rounds x ${CYCLES_PER_ROUND} cycles, shuffled per round, after a warm-up of ${WARMUP_CYCLES} cycles each`);
    const measured = [...contenders, floor];
    const rounds = await interleavedCycles(new Map(measured.map((c) => [c, c.runners[0]])), CYCLE_ROUNDS, CYCLES_PER_ROUND);
    const cycles = new Map<Contender, number>(measured.map((c) => [c, median(rounds.get(c)!)]));
    for (const contender of measured) {
      const perSecond = cycles.get(contender)!;
      console.log(`uncontended ${contender.label}: ${Math.round(perSecond)} cycles/s (${(1000 / perSecond).toFixed(3)} ms per cycle)`);
    }
    console.log(`flash sale: ${SALE_CONNECTIONS} connections x ${SALE_BUYERS_PER_CONNECTION} buyers, stock ${SALE_STOCK}, one lock name, median of ${SALE_REPEATS} after one warm-up sale each`);
    const sales = new Map<Contender, FlashSaleResult>();
    for (const contender of contenders) await flashSale(contender.runners, SALE_BUYERS_PER_CONNECTION, SALE_STOCK);
    for (const contender of contenders) {
      contender.gaveUp = 0;
      contender.firstError = undefined;
      const result = await medianFlashSale(SALE_REPEATS, () => flashSale(contender.runners, SALE_BUYERS_PER_CONNECTION, SALE_STOCK));
      sales.set(contender, result);
      printFlashSale(contender.label, result);
      if (contender.gaveUp > 0) console.log(`  ${contender.gaveUp} of ${SALE_REPEATS * SALE_CONNECTIONS * SALE_BUYERS_PER_CONNECTION} buyers' calls threw, first: ${contender.firstError}`);
    }

    const [ours, ...peers] = contenders;
    const bestCycle = peers.reduce((best, c) => (cycles.get(c)! > cycles.get(best)! ? c : best));
    const bestSale = peers.reduce((best, c) => (sales.get(c)!.makespanMs < sales.get(best)!.makespanMs ? c : best));
    console.log('ratios (this library / peer):');
    for (const peer of peers) {
      const paired = pairedRatio(rounds.get(ours)!, rounds.get(peer)!);
      console.log(
        `  vs ${peer.label}: uncontended cycle time ${(1 / paired.median).toFixed(2)}x (round by round), ` +
          `flash-sale makespan ${formatRatio(sales.get(ours)!.makespanMs, sales.get(peer)!.makespanMs)}`,
      );
    }
    const timeRatio = (a: Contender, b: Contender) => pairedTimeRatio(rounds.get(a)!, rounds.get(b)!);
    const [cycleTimeRatio, floorVsPeer, oursVsFloor] = [timeRatio(ours, bestCycle), timeRatio(floor, bestCycle), timeRatio(ours, floor)];
    console.log(`uncontended cycle time, round by round: the scripts alone ${floorVsPeer.toFixed(2)}x the best peer's; this library ${oursVsFloor.toFixed(2)}x its scripts alone`);
    recordFigure(`uncontended cycle time, ${count} masters: the library's scripts alone vs the best peer / the library vs its scripts alone`, `${floorVsPeer.toFixed(2)}x / ${oursVsFloor.toFixed(2)}x`);
    const saleRatio = sales.get(ours)!.makespanMs / sales.get(bestSale)!.makespanMs;
    recordTarget(`uncontended cycle time vs the best peer's (${bestCycle.label})`, cycleTimeRatio, '<=', 1.1);
    recordTarget(`flash-sale makespan vs the best peer's (${bestSale.label})`, saleRatio, '<=', 0.2);
  } finally {
    await Promise.all(services.map((service) => service.onApplicationShutdown()));
    for (const client of clients) client.disconnect();
    await masters.stop();
  }
}

/**
 * This library's acquire and release scripts sent by plain ioredis clients to every master at
 * once, going on as soon as a majority answered, as the library does, with nothing else (no
 * in-process queue, lease, renewal, re-entrancy, timeouts or fence write-back: the masters' fences
 * stay in step here, so none is needed). The floor of this library's uncontended Redlock cycle.
 */
function scriptsAlone(clients: Redis[]): LockRunner {
  const majority = quorum(clients.length);
  let seq = 0;
  // The masters' life markers, as the library writes them at its first grant (server-life.ts).
  const lives = Promise.all(clients.map((client) => beginLifeScript.run(client, [LIFE_KEY], ['bench', LEASE_MS])));
  return async (name, section) => {
    await lives;
    const entry = `floor-${(++seq).toString(36)}`;
    const keys = redlockKeys(name);
    const grants = await firstMajority(clients, (client) => acquireScript.run(client, keys, [entry, LEASE_MS]), majority);
    if (grants.some((grant) => typeof grant !== 'number')) throw new Error(`the scripts-alone floor found "${name}" held`);
    await section();
    await firstMajority(clients, (client) => releaseScript.run(client, keys, [entry]), majority);
  };
}

/** Sends to every client at once; resolves with the first `majority` replies (a failure rejects: a floor has no failures to count). */
function firstMajority<T>(clients: Redis[], send: (client: Redis) => ReturnType<RedisScript<T>['run']>, majority: number): Promise<T[]> {
  return new Promise((resolve, reject) => {
    const replies: T[] = [];
    for (const client of clients) {
      send(client).then((reply) => {
        replies.push(reply);
        if (replies.length === majority) resolve(replies);
      }, reject);
    }
  });
}
