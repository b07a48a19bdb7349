import { execFile } from 'node:child_process';
import path from 'node:path';
import { promisify } from 'node:util';
import { EtcdCluster } from '../servers/etcd-server';
import { startRedisServer } from '../servers/redis-server';
import { COLD_CYCLES } from './cold-process.worker';
import { progress } from './progress';
import { median, pairedRatio } from './stats';
import { recordFigure, recordTarget } from './summary';

/** Fresh processes per library; each round (ours, the peer, and the floors if any) runs back to back in a random order. */
const PROCESSES = 5;
const WORKER = path.join(__dirname, 'cold-process.worker.js');
const run$ = promisify(execFile);
/** Where the Redis pairing's floor lies in a cold process (bench/lean-redis-lock.ts). */
const REDIS_FLOORS = [
  { library: 'redis-scripts', label: "floor: the library's scripts alone (a plain client)" },
  { library: 'lean-redis', label: 'a lean lock over those scripts' },
];

interface Pairing {
  backend: string;
  ours: string;
  peer: string;
  peerLabel: string;
  target: number;
  /** Floors run in the same rounds: the library's own server calls alone, and a lean lock over them. */
  floors?: Array<{ library: string; label: string }>;
}

/**
 * The cold process: a cron job, a CLI or a freshly scaled replica runs a few hundred cycles and
 * exits, never reaching V8's optimized code. Each library runs in a fresh Node process of its
 * own, connects, then times its first COLD_CYCLES uncontended cycles with no warm-up.
 */
export async function run(): Promise<void> {
  const redis = await startRedisServer();
  const etcd = await EtcdCluster.start(1);
  try {
    const pairings: Array<Pairing & { address: string }> = [
      { backend: 'redis', ours: 'ours-redis', peer: 'redis-semaphore', peerLabel: "redis-semaphore's Mutex", target: 1.2, floors: REDIS_FLOORS, address: redis.url },
      { backend: 'etcd', ours: 'ours-etcd', peer: 'etcd3', peerLabel: 'the etcd3 Lock', target: 0.8, address: etcd.hosts.join(',') },
    ];
    console.log(`${PROCESSES} fresh processes per library, each timing its first ${COLD_CYCLES} uncontended cycles after connecting (no warm-up); ratios per pair of processes run back to back`);
    for (const pairing of pairings) {
      const floors = pairing.floors ?? [];
      // Each library's time in every round, in the rounds' order.
      const timesOf = new Map<string, number[]>([pairing.ours, pairing.peer, ...floors.map((floor) => floor.library)].map((library) => [library, []]));
      for (let i = 0; i < PROCESSES; i++) {
        for (const library of [...timesOf.keys()].sort(() => Math.random() - 0.5)) timesOf.get(library)!.push(await coldRun(library, pairing.address));
        progress(`cold processes (${pairing.backend})`, i + 1, PROCESSES);
      }
      const ours = timesOf.get(pairing.ours)!;
      const theirs = timesOf.get(pairing.peer)!;
      const pairs = (times: number[]) => times.map((value, i) => (value / theirs[i]).toFixed(2)).join(', ');
      const ratio = pairedRatio(ours, theirs);
      console.log(
        `${pairing.backend}: this library ${(median(ours) / COLD_CYCLES).toFixed(3)} ms per cycle, ${pairing.peerLabel} ${(median(theirs) / COLD_CYCLES).toFixed(3)} ms ` +
          `(medians over processes); ratio ${ratio.median.toFixed(2)}x (pairs: ${pairs(ours)})`,
      );
      recordTarget(`cold process, first ${COLD_CYCLES} cycles vs ${pairing.peerLabel}`, ratio.median, '<=', pairing.target);
      for (const floor of floors) {
        const times = timesOf.get(floor.library)!;
        const floorRatio = pairedRatio(times, theirs);
        console.log(`  ${floor.label}, cold: ${floorRatio.median.toFixed(2)}x ${pairing.peerLabel} (pairs: ${pairs(times)})`);
        recordFigure(`cold process, ${floor.label}, vs ${pairing.peerLabel}`, `${floorRatio.median.toFixed(2)}x`);
      }
    }
  } finally {
    await etcd.stop();
    await redis.stop();
  }
}

/** One fresh process of `library`: the time of its first cycles, in ms. */
async function coldRun(library: string, address: string): Promise<number> {
  const { stdout } = await run$(process.execPath, [WORKER, library, address], { timeout: 120_000 });
  return (JSON.parse(stdout.trim().split('\n').pop()!) as { ms: number }).ms;
}
