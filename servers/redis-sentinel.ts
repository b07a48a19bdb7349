import { writeFile } from 'node:fs/promises';
import path from 'node:path';
import { freePort } from './free-port';
import { startRedisServer, type RedisServer } from './redis-server';
import { ServerProcess } from './server-process';
import { inTempDir } from './temp-dir-server';

export interface RedisSentinelOptions {
  /** The name the sentinel monitors the primary under (ioredis' `name`). Default 'locks-primary'. */
  name?: string;
  /** Sentinel's `down-after-milliseconds`: silence before the primary is taken for down. Default 500. */
  downAfterMs?: number;
  /** Sentinel's `failover-timeout`. Default 2000. */
  failoverTimeoutMs?: number;
}

/** The user the replica replicates as (`masteruser`), so that a test can cut it off alone. */
const REPLICATION_USER = 'replicator';
const REPLICATION_PASSWORD = 'replication-secret';

/** A sentinel: Debian's redis-server in sentinel mode (`redis-server <conf> --sentinel`). */
export async function startSentinel(monitored: { name: string; port: number }, settings: string[] = []): Promise<ServerProcess & { stop(): Promise<void> }> {
  const port = await freePort();
  return inTempDir('lock-sentinel-', async (dir) => {
    // Sentinel rewrites its config file, so it lives in the temp dir.
    const config = path.join(dir, 'sentinel.conf');
    const lines = [`port ${port}`, 'bind 127.0.0.1', `dir ${dir}`, `sentinel monitor ${monitored.name} 127.0.0.1 ${monitored.port} 1`];
    await writeFile(config, [...lines, ...settings.map((setting) => `sentinel ${setting.replace('%s', monitored.name)}`), ''].join('\n'));
    return ServerProcess.start({ name: `redis-sentinel on 127.0.0.1:${port}`, command: 'redis-server', args: [config, '--sentinel'], port });
  });
}

/**
 * A throwaway primary, one replica of it and one sentinel watching them (quorum 1), on free
 * loopback ports, with a fast failover: the primary is taken for down after `downAfterMs` of
 * silence and the replica promoted. Replication is Redis's own: asynchronous. No persistence
 * (see startRedisServer). Start fails loudly when a server cannot come up.
 */
export class RedisSentinelGroup {
  private constructor(
    readonly name: string,
    readonly primary: RedisServer,
    readonly replica: RedisServer,
    readonly sentinel: ServerProcess & { stop(): Promise<void> },
  ) {}

  static async start(options: RedisSentinelOptions = {}): Promise<RedisSentinelGroup> {
    const name = options.name ?? 'locks-primary';
    const started: { stop(): Promise<void> }[] = [];
    try {
      const primary = await startRedisServer();
      started.push(primary);
      await redisCall(primary.port, ['ACL', 'SETUSER', REPLICATION_USER, 'on', `>${REPLICATION_PASSWORD}`, '~*', '&*', '+@all']);
      const replica = await startRedisServer([
        '--replicaof', '127.0.0.1', String(primary.port),
        '--masteruser', REPLICATION_USER,
        '--masterauth', REPLICATION_PASSWORD,
      ]);
      started.push(replica);
      await untilReplicating(primary);
      const sentinel = await startSentinel({ name, port: primary.port }, [
        `down-after-milliseconds %s ${options.downAfterMs ?? 500}`,
        `failover-timeout %s ${options.failoverTimeoutMs ?? 2_000}`,
        'parallel-syncs %s 1',
        // Known from the start: else the sentinel learns of the replica from the primary's INFO, every 10 s.
        `known-replica %s 127.0.0.1 ${replica.port}`,
      ]);
      started.push(sentinel);
      const group = new RedisSentinelGroup(name, primary, replica, sentinel);
      await group.untilSentinelSees(1, 30_000);
      return group;
    } catch (error) {
      await Promise.all(started.map((server) => server.stop()));
      throw error;
    }
  }

  /** ioredis' Sentinel options: `{ sentinels, name }`. */
  get connection(): { sentinels: { host: string; port: number }[]; name: string } {
    return { sentinels: [{ host: '127.0.0.1', port: this.sentinel.port }], name: this.name };
  }

  /** The port of the primary as the sentinel names it now (`SENTINEL get-master-addr-by-name`). */
  async primaryPort(): Promise<number> {
    const [, port] = (await redisCall(this.sentinel.port, ['SENTINEL', 'get-master-addr-by-name', this.name])) as string[];
    return Number(port);
  }

  /** Resolves once the sentinel names `port` as the primary; rejects after `timeoutMs`. */
  async untilPrimaryIs(port: number, timeoutMs: number): Promise<void> {
    const deadline = Date.now() + timeoutMs;
    while ((await this.primaryPort().catch(() => 0)) !== port) {
      if (Date.now() > deadline) throw new Error(`the sentinel did not promote 127.0.0.1:${port} within ${timeoutMs} ms (it names ${await this.primaryPort().catch(String)})`);
      await new Promise((resolve) => setTimeout(resolve, 10));
    }
  }

  /**
   * Cuts the replica off: the primary disables the replication user and drops its connection,
   * so that the replica keeps its data of this moment and misses every later write (a replica
   * lagging behind, to the extreme). Sentinel still promotes it when the primary dies within
   * 10 x down-after-milliseconds of the cut (it skips replicas whose link was down longer).
   */
  async cutReplication(): Promise<void> {
    await redisCall(this.primary.port, ['ACL', 'SETUSER', REPLICATION_USER, 'off']);
    await redisCall(this.primary.port, ['CLIENT', 'KILL', 'USER', REPLICATION_USER]);
    const deadline = Date.now() + 5_000;
    while (!/master_link_status:down/.test(String(await redisCall(this.replica.port, ['INFO', 'replication'])))) {
      if (Date.now() > deadline) throw new Error('the replica still replicates 5 s after it was cut off');
      await new Promise((resolve) => setTimeout(resolve, 10));
    }
  }

  /** Resolves once the replica has applied everything the primary wrote (their replication offsets agree). */
  async untilReplicaCaughtUp(timeoutMs: number): Promise<void> {
    const deadline = Date.now() + timeoutMs;
    for (;;) {
      const [primary, replica] = await Promise.all([this.primary, this.replica].map(async (server) => String(await redisCall(server.port, ['INFO', 'replication']))));
      const written = /master_repl_offset:(\d+)/.exec(primary)?.[1];
      if (written !== undefined && /slave_repl_offset:(\d+)/.exec(replica)?.[1] === written) return;
      if (Date.now() > deadline) throw new Error(`the replica did not catch up with the primary within ${timeoutMs} ms:\n${primary}\n${replica}`);
      await new Promise((resolve) => setTimeout(resolve, 10));
    }
  }

  async stop(): Promise<void> {
    await this.sentinel.stop();
    await Promise.all([this.primary.stop(), this.replica.stop()]);
  }

  private async untilSentinelSees(replicas: number, timeoutMs: number): Promise<void> {
    const deadline = Date.now() + timeoutMs;
    for (;;) {
      const known = (await redisCall(this.sentinel.port, ['SENTINEL', 'replicas', this.name]).catch(() => [])) as unknown[];
      if (known.length >= replicas) return;
      if (Date.now() > deadline) throw new Error(`the sentinel found no replica of ${this.name} within ${timeoutMs} ms`);
      await new Promise((resolve) => setTimeout(resolve, 50));
    }
  }
}

/** Waits until the primary has a replica online (its first full sync done). */
async function untilReplicating(primary: RedisServer, timeoutMs = 30_000): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!/slave0:.*state=online/.test(String(await redisCall(primary.port, ['INFO', 'replication'])))) {
    if (Date.now() > deadline) throw new Error(`no replica of 127.0.0.1:${primary.port} online within ${timeoutMs} ms`);
    await new Promise((resolve) => setTimeout(resolve, 20));
  }
}

/** One command on a fresh ioredis connection (loaded here: a server launcher needs no client otherwise). */
async function redisCall(port: number, command: string[]): Promise<unknown> {
  const { Redis } = await import('ioredis');
  const client = new Redis({ host: '127.0.0.1', port, lazyConnect: true, maxRetriesPerRequest: 0, retryStrategy: () => null });
  try {
    await client.connect();
    return await client.call(command[0], ...command.slice(1));
  } finally {
    client.disconnect();
  }
}
