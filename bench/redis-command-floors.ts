import { connect, type Socket } from 'node:net';
import { ownerValue } from '../lib/backends/redis/redis-commands';
import { lockKeys } from '../lib/backends/redis/redis-keys';
import { acquireShortScript, releaseShortScript } from '../lib/backends/redis/redis-lock-scripts';
import { RedisScript } from '../lib/backends/redis/redis-script';
import { LIFE_KEY } from '../lib/backends/redis/server-life-scripts';
import { bulks, commandHeader } from '../lib/backends/redis/resp-encoding';
import { median } from './stats';
import { interleavedCycles, type LockRunner } from './workloads';

const ROUNDS = 31;
const CYCLES_PER_ROUND = 500;
/** The server-CPU pass: the figure's resolution is getrusage's (1 us) over this many cycles. */
const CPU_ROUNDS = 15;
const CPU_CYCLES_PER_ROUND = 2000;
const LEASE_MS = 10_000;

/**
 * One uncontended cycle as bare Redis commands: what it sends for the acquire and for the
 * release, each with the number of replies it waits for. Nothing else runs around them.
 */
interface CommandCycle {
  readonly label: string;
  readonly acquire: Buffer;
  readonly acquireReplies: number;
  /** The release, from the acquire's last reply; throws when that reply refused the lock. */
  readonly release: (acquireReply: string) => Buffer | string;
}

const command = (...words: (string | number)[]) => commandHeader(words.length) + bulks(words);
/** A script's EVALSHA in RESP, encoded as the library encodes its own calls. */
const evalsha = (script: RedisScript<unknown>, keys: readonly string[], args: (string | number)[]) => script.call(keys, args).encoded(false);

/** The Mutex's release: compare and delete. */
const compareAndDelete = new RedisScript<0 | 1>('compare and delete', `if redis.call('get', KEYS[1]) == ARGV[1] then return redis.call('del', KEYS[1]) end return 0`);
/** The same, but freeing the key only when nobody queues (a FIFO lock must hand it on otherwise). */
const compareAndDeleteIfNoQueue = new RedisScript<0 | 1 | 2>(
  'compare and delete if nobody queues',
  `if redis.call('get', KEYS[1]) ~= ARGV[1] then return 0 end
if redis.call('llen', KEYS[2]) == 0 then redis.call('del', KEYS[1]) return 1 end return 2`,
);

/** The fence-and-FIFO acquire as one script: what running a script costs over MULTI. KEYS: owner, fence, queue. */
const fencedFifoScript = new RedisScript<number | null>(
  'fence and FIFO in one script',
  `local fence = redis.call('incr', KEYS[2])
if redis.call('set', KEYS[1], ARGV[1], 'nx', 'px', ARGV[2]) and redis.call('llen', KEYS[3]) == 0 then return fence end`,
);

/**
 * The same, reading what restart protection and lock-delay need on every acquire (issue 28): the
 * server's life marker and the lock's delay key. KEYS: owner, fence, queue, life marker, delay key.
 */
const guardedScript = new RedisScript<number | null>(
  'fence, FIFO, life marker and lock-delay in one script',
  `if not redis.call('hmget', KEYS[4], 'ttl', 'until', 'floor')[1] then return end
local fence = redis.call('incr', KEYS[2])
if redis.call('exists', KEYS[5]) == 0 and redis.call('set', KEYS[1], ARGV[1], 'nx', 'px', ARGV[2]) and redis.call('llen', KEYS[3]) == 0 then return fence end`,
);

/** The keys the library sends a script that may grant: the lock's five and the server's life marker. */
export const grantingKeys = (name: string): string[] => [...lockKeys(name).all, LIFE_KEY];

/** The bare cycle a FIFO lock with fences needs at the least, and this library's, as the rows name them. */
export const FENCE_AND_FIFO = 'with a fence and FIFO (MULTI, INCR, SET NX PX, LLEN, EXEC; a release that checks the queue)';
export const OUR_SCRIPTS = "this library's acquire and release scripts";

/**
 * Cycles from the Mutex's commands up to this library's scripts, each adding what one guarantee
 * needs at the least: a fence taken atomically with the key (MULTI, cheaper than any script), then
 * the queue checked on both sides for FIFO; then the same in a script, then with the reads restart
 * protection and lock-delay add. Every one of them is a correct uncontended cycle.
 */
function commandCycles(name: string): CommandCycle[] {
  const keys = lockKeys(name);
  const owner = 'bench-floor-owner-0001';
  /** A release sent once the acquire's reply shows SET's OK. */
  const afterOk = (script: RedisScript<unknown>, releaseKeys: string[]) => {
    const release = Buffer.from(evalsha(script, releaseKeys, [owner]));
    return (reply: string) => {
      if (!reply.includes('+OK')) throw new Error(`bare cycle on "${name}": the acquire was refused (${JSON.stringify(reply)})`);
      return release;
    };
  };
  const fencedAcquire = (checkQueue: boolean) =>
    Buffer.from(command('MULTI') + command('INCR', keys.fence) + command('SET', keys.owner, owner, 'NX', 'PX', LEASE_MS) + (checkQueue ? command('LLEN', keys.queue) : '') + command('EXEC'));
  /** A release sent once a script's acquire replied with a fence. */
  const afterFence = (script: RedisScript<unknown>, releaseKeys: string[], value: string) => {
    const release = Buffer.from(evalsha(script, releaseKeys, [value]));
    return (reply: string) => {
      if (!/^:\d+\r\n$/.test(reply)) throw new Error(`bare cycle on "${name}": the acquire was refused (${JSON.stringify(reply)})`);
      return release;
    };
  };
  return [
    {
      label: "the Mutex's commands (SET NX PX; a compare-and-delete script)",
      acquire: Buffer.from(command('SET', keys.owner, owner, 'NX', 'PX', LEASE_MS)),
      acquireReplies: 1,
      release: afterOk(compareAndDelete, [keys.owner]),
    },
    {
      label: 'with a fence (MULTI, INCR, SET NX PX, EXEC; the same release)',
      acquire: fencedAcquire(false),
      acquireReplies: 4,
      release: afterOk(compareAndDelete, [keys.owner]),
    },
    {
      label: FENCE_AND_FIFO,
      acquire: fencedAcquire(true),
      acquireReplies: 5,
      release: afterOk(compareAndDeleteIfNoQueue, [keys.owner, keys.queue]),
    },
    {
      label: 'the same as one script (INCR, SET NX PX, LLEN; the same release)',
      acquire: Buffer.from(evalsha(fencedFifoScript, [keys.owner, keys.fence, keys.queue], [owner, LEASE_MS])),
      acquireReplies: 1,
      release: afterFence(compareAndDeleteIfNoQueue, [keys.owner, keys.queue], owner),
    },
    {
      label: 'that script reading the life marker and the delay key too (HMGET, EXISTS; the same release)',
      acquire: Buffer.from(evalsha(guardedScript, [keys.owner, keys.fence, keys.queue, LIFE_KEY, `${keys.owner.slice(0, -5)}delay`], [owner, LEASE_MS])),
      acquireReplies: 1,
      release: afterFence(compareAndDeleteIfNoQueue, [keys.owner, keys.queue], owner),
    },
    {
      label: OUR_SCRIPTS,
      // As the library sends it for a caller that may wait: '<staleAfterMs> <clientId>' too.
      acquire: Buffer.from(evalsha(acquireShortScript, grantingKeys(name), [owner, LEASE_MS, '60000 bench-floor'])),
      acquireReplies: 1,
      release: (reply) => {
        const fence = /^:(\d+)\r\n$/.exec(reply)?.[1];
        if (fence === undefined) throw new Error(`bare cycle on "${name}": the acquire was refused (${JSON.stringify(reply)})`);
        return evalsha(releaseShortScript, [keys.owner, keys.queue], [ownerValue(fence, owner)]);
      },
    },
  ];
}

/** Where one RESP reply starting at `at` ends, or -1 when the buffer does not hold all of it yet. */
function replyEnd(buffer: Buffer, at: number): number {
  const lineEnd = buffer.indexOf('\r\n', at);
  if (lineEnd < 0) return -1;
  const type = String.fromCharCode(buffer[at]);
  if (type === '$') {
    const length = Number(buffer.toString('latin1', at + 1, lineEnd));
    if (length < 0) return lineEnd + 2;
    const end = lineEnd + 2 + length + 2;
    return end <= buffer.length ? end : -1;
  }
  if (type === '*') {
    let end = lineEnd + 2;
    for (let count = Number(buffer.toString('latin1', at + 1, lineEnd)); count > 0 && end >= 0; count--) end = end < buffer.length ? replyEnd(buffer, end) : -1;
    return end;
  }
  return lineEnd + 2;
}

/** A bare connection that sends pre-encoded bytes and waits for a number of replies: no client library's work. */
class BareConnection {
  private pending: Buffer = Buffer.alloc(0);
  private awaited = 0;
  private replies: string[] = [];
  private done?: (replies: string[]) => void;
  private failed?: (error: Error) => void;

  private constructor(private readonly socket: Socket) {
    socket.on('data', (data) => this.read(data));
    // A bench must end with an error, not hang, when the server goes away.
    socket.on('error', (error) => this.failed?.(error));
    socket.on('close', () => this.failed?.(new Error('redis-server closed the bare connection')));
  }

  static async open(port: number): Promise<BareConnection> {
    const socket = connect(port, '127.0.0.1');
    socket.setNoDelay(true);
    await new Promise<void>((resolve, reject) => socket.once('connect', resolve).once('error', reject));
    return new BareConnection(socket);
  }

  send(bytes: Buffer | string, replies: number): Promise<string[]> {
    return new Promise((resolve, reject) => {
      this.awaited = replies;
      this.replies = [];
      this.done = resolve;
      this.failed = reject;
      this.socket.write(bytes);
    });
  }

  close(): void {
    this.failed = undefined;
    this.socket.destroy();
  }

  private read(data: Buffer): void {
    this.pending = this.pending.length === 0 ? data : Buffer.concat([this.pending, data]);
    let at = 0;
    for (let end = replyEnd(this.pending, at); end >= 0; end = at < this.pending.length ? replyEnd(this.pending, at) : -1) {
      this.replies.push(this.pending.toString('utf8', at, end));
      at = end;
    }
    this.pending = this.pending.subarray(at);
    if (this.replies.length >= this.awaited && this.done) {
      const done = this.done;
      this.done = this.failed = undefined;
      done(this.replies);
    }
  }
}

/** Per command cycle, its time in microseconds, one value per round (rounds aligned). */
export type CommandCycleTimes = Map<string, number[]>;

/** Per command cycle, rounds aligned: its time, and the CPU redis-server's main thread spent on it. */
export interface CommandCycleCosts {
  readonly wall: CommandCycleTimes;
  readonly serverCpu: CommandCycleTimes;
}

/**
 * The least each guarantee costs in round trips and server work: bare cycles of commands on one
 * connection, every cycle once per round in a shuffled order, as the libraries' cycles are run.
 * Client work is the same (next to none) for each, so the differences are Redis' and the kernel's.
 * Then the server's own CPU per cycle (INFO cpu around each round's cycles): the round trips' time
 * swings by tens of microseconds between runs on a shared machine, and the in-round differences
 * of the server's work swing less (a row's own figure still drifts).
 */
export async function measureCommandCycles(port: number): Promise<CommandCycleCosts> {
  const connection = await BareConnection.open(port);
  try {
    for (const script of [compareAndDelete, compareAndDeleteIfNoQueue, fencedFifoScript, guardedScript, acquireShortScript, releaseShortScript]) {
      await connection.send(command('SCRIPT', 'LOAD', script.lua), 1);
    }
    // The scripts that grant refuse while the server has no life marker: one, unless a library wrote it.
    await connection.send(command('HSETNX', LIFE_KEY, 'id', 'bench-command-floors') + command('HSETNX', LIFE_KEY, 'ttl', LEASE_MS), 2);
    // Each round locks a fresh name: its cycles are encoded once, on first use.
    const cyclesByName = new Map<string, CommandCycle[]>();
    const labels = commandCycles('').map((cycle) => cycle.label);
    const runners = new Map(
      labels.map((label, index): [string, LockRunner] => [
        label,
        async (name, section) => {
          let cycles = cyclesByName.get(name);
          if (cycles === undefined) cyclesByName.set(name, (cycles = commandCycles(name)));
          const cycle = cycles[index];
          const replies = await connection.send(cycle.acquire, cycle.acquireReplies);
          const release = cycle.release(replies[replies.length - 1]);
          await section();
          await connection.send(release, 1);
        },
      ]),
    );
    const perSecond = await interleavedCycles(runners, ROUNDS, CYCLES_PER_ROUND);
    const wall = new Map([...perSecond].map(([label, rounds]): [string, number[]] => [label, rounds.map((cycles) => 1e6 / cycles)]));
    return { wall, serverCpu: await serverCpuPerCycle(connection, runners) };
  } finally {
    connection.close();
  }
}

/** CPU seconds redis-server's main thread has spent (INFO cpu, Redis 6 and later). */
async function serverMainThreadCpu(connection: BareConnection): Promise<number> {
  const [info] = await connection.send(command('INFO', 'cpu'), 1);
  const user = /used_cpu_user_main_thread:([\d.]+)/.exec(info)?.[1];
  const sys = /used_cpu_sys_main_thread:([\d.]+)/.exec(info)?.[1];
  if (user === undefined || sys === undefined) throw new Error(`INFO cpu has no main-thread figures (Redis 6 or later needed): ${JSON.stringify(info)}`);
  return Number(user) + Number(sys);
}

/** Per cycle, the server's CPU in microseconds, one value per round: each round runs every cycle in a shuffled order. */
async function serverCpuPerCycle(connection: BareConnection, runners: ReadonlyMap<string, LockRunner>): Promise<CommandCycleTimes> {
  const results = new Map<string, number[]>([...runners.keys()].map((label) => [label, []]));
  const noop = () => undefined;
  for (let round = 0; round < CPU_ROUNDS; round++) {
    const name = `bench-server-cpu-${process.pid}-${round}`;
    for (const label of [...runners.keys()].sort(() => Math.random() - 0.5)) {
      const run = runners.get(label)!;
      const before = await serverMainThreadCpu(connection);
      for (let cycle = 0; cycle < CPU_CYCLES_PER_ROUND; cycle++) await run(name, noop);
      results.get(label)!.push(((await serverMainThreadCpu(connection)) - before) * 1e6 / CPU_CYCLES_PER_ROUND);
    }
  }
  return results;
}

/** Per cycle, the median over rounds of its time, and of its time minus the first cycle's (the Mutex's commands) in the same round. */
export function addedOverFirst(times: CommandCycleTimes): { label: string; us: number; addedUs: number }[] {
  const first = [...times.values()][0];
  return [...times].map(([label, values]) => ({ label, us: median(values), addedUs: median(values.map((value, round) => value - first[round])) }));
}
