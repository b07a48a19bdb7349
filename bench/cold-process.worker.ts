/**
 * One fresh process of the cold-process row (cold-process.bench.ts): connects one library to the
 * server, then times its first COLD_CYCLES uncontended acquire+release cycles, with no warm-up,
 * and prints `{"ms": <total>}`. Argv: library, then the server's address (a Redis URL, or etcd hosts
 * joined by commas). Each library is loaded here alone, as a short-lived process would load it.
 */
import 'reflect-metadata';
import type { Redis } from 'ioredis';
import type { LockRunner } from './workloads';

export const COLD_CYCLES = 200;

type Cycle = (name: string) => Promise<void>;

interface Connected {
  cycle: Cycle;
  close(): Promise<void>;
}

const LEASE_MS = 10_000;
/** The floors' wait option: they never wait (an uncontended name), but the scripts carry it. */
const WAIT_MS = 10_000;

const LIBRARIES: Record<string, (address: string) => Promise<Connected>> = {
  async 'ours-redis'(url) {
    const [{ createBackend }, { lockServiceOver }] = await Promise.all([import('../lib/backends/registry'), import('./lock-services')]);
    const backend = await createBackend({ type: 'redis', url });
    await backend.ping!();
    const service = lockServiceOver(backend);
    return { cycle: (name) => service.withLock(name, noop, { ttlMs: LEASE_MS }), close: () => service.onApplicationShutdown() };
  },
  /** The floors of the Redis pairing (lean-redis-lock.ts): the library's own scripts alone, cold... */
  async 'redis-scripts'(url) {
    const { scriptsAlone } = await import('./lean-redis-lock');
    return onPlainRedis(url, (client) => scriptsAlone(client, LEASE_MS, WAIT_MS));
  },
  /** ... and a lean lock over them. */
  async 'lean-redis'(url) {
    const { leanRedisLock } = await import('./lean-redis-lock');
    return onPlainRedis(url, (client) => leanRedisLock(client, url, LEASE_MS, WAIT_MS));
  },
  async 'redis-semaphore'(url) {
    const [{ Redis }, { Mutex }] = await Promise.all([import('ioredis'), import('redis-semaphore')]);
    const client = new Redis(url);
    await client.ping();
    return {
      cycle: async (name) => {
        const mutex = new Mutex(client, name, { lockTimeout: LEASE_MS });
        await mutex.acquire();
        try {
          noop();
        } finally {
          await mutex.release();
        }
      },
      close: async () => void client.disconnect(),
    };
  },
  async 'ours-etcd'(hosts) {
    const [{ createBackend }, { lockServiceOver }] = await Promise.all([import('../lib/backends/registry'), import('./lock-services')]);
    const backend = await createBackend({ type: 'etcd', hosts: hosts.split(',') });
    await backend.ping!();
    const service = lockServiceOver(backend);
    return { cycle: (name) => service.withLock(name, noop, { ttlMs: LEASE_MS }), close: () => service.onApplicationShutdown() };
  },
  async etcd3(hosts) {
    const { Etcd3 } = await import('etcd3');
    const client = new Etcd3({ hosts: hosts.split(',') });
    await client.get('cold-process-ping');
    return {
      // Uncontended: the try-lock always succeeds, so no retry loop is needed.
      cycle: async (name) => {
        const lock = client.lock(name).ttl(LEASE_MS / 1000);
        await lock.acquire();
        try {
          noop();
        } finally {
          await lock.release();
        }
      },
      close: async () => client.close(),
    };
  },
};

function noop(): void {}

/** `runnerOf`'s lock on a plain ioredis client, connected (a PING) before its cycles are timed. */
async function onPlainRedis(url: string, runnerOf: (client: Redis) => LockRunner): Promise<Connected> {
  const { Redis } = await import('ioredis');
  const client = new Redis(url);
  await client.ping();
  const runner = runnerOf(client);
  return { cycle: (name) => runner(name, noop), close: async () => void client.disconnect() };
}

async function main(): Promise<void> {
  const [library, address] = process.argv.slice(2);
  const connect = LIBRARIES[library];
  if (!connect || !address) throw new Error(`usage: cold-process.worker <${Object.keys(LIBRARIES).join('|')}> <address>`);
  const connected = await connect(address);
  const name = `cold-${library}-${process.pid}`;
  const started = performance.now();
  for (let i = 0; i < COLD_CYCLES; i++) await connected.cycle(name);
  const ms = performance.now() - started;
  await connected.close();
  process.stdout.write(`${JSON.stringify({ ms })}\n`);
}

if (require.main === module) {
  main().then(
    () => process.exit(0),
    (error) => {
      console.error(error);
      process.exit(1);
    },
  );
}
