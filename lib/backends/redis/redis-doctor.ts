import type { BackendSettings } from '../backend-definition';
import { Diagnosis, type DoctorReport } from '../backend-doctor';
import { loadPeer } from '../load-peer';
import { redisAddress } from './redis-address';
import type { RedisBackendOptions } from './redis-options';
import { checkRedisServer, type RedisCaller, type RedisIdentity } from './redis-server-checks';

/** The redis backend's doctor: every check of checkRedisServer, on each primary of a Cluster. */
export async function doctorRedis(options: RedisBackendOptions, settings: BackendSettings): Promise<DoctorReport> {
  const address = redisAddress(options);
  const diagnosis = new Diagnosis('redis', address);
  await checkRedisDeployment(options, settings, diagnosis);
  return diagnosis.report();
}

/**
 * Checks the servers one backend's options reach, each as `checkRedisServer` does; a server that
 * cannot be asked goes to `diagnosis.unreachable`. Used by the Redlock doctor for each master.
 */
export async function checkRedisDeployment(options: RedisBackendOptions, settings: BackendSettings, diagnosis: Diagnosis, label = redisAddress(options)): Promise<RedisIdentity[]> {
  let connection: { servers: { server: string; caller: RedisCaller }[]; close(): void };
  try {
    connection = await connect(options, settings.serverTimeoutMs, label);
  } catch (error) {
    diagnosis.unreachable(label, error);
    return [];
  }
  try {
    const identities: RedisIdentity[] = [];
    for (const { server, caller } of connection.servers) {
      try {
        identities.push(await checkRedisServer(caller, server, diagnosis, settings.ttlMs));
      } catch (error) {
        diagnosis.unreachable(server, error);
      }
    }
    return identities;
  } finally {
    connection.close();
  }
}

type ClusterLike = { nodes(role: 'master'): ({ options: { host?: string; port?: number } } & RedisCaller)[] };

/**
 * A short-lived connection of our own, from the backend's own url and options (no reconnection:
 * a server that refuses is reported at once), or the supplied client as it is: the doctor only
 * reads (INFO, CONFIG GET, TIME) and never closes or changes it. A Cluster: each of its primaries.
 */
async function connect(options: RedisBackendOptions, serverTimeoutMs: number, address: string): Promise<{ servers: { server: string; caller: RedisCaller }[]; close(): void }> {
  if (options.client) {
    const cluster = options.client as unknown as Partial<ClusterLike>;
    if (typeof cluster.nodes === 'function') {
      const servers = cluster.nodes('master').map((node) => ({ server: `${node.options.host ?? 'localhost'}:${node.options.port ?? 6379}`, caller: node }));
      return { servers, close: () => undefined };
    }
    return { servers: [{ server: address, caller: options.client as unknown as RedisCaller }], close: () => undefined };
  }
  const { Redis } = loadPeer<typeof import('ioredis')>('ioredis', 'redis');
  const clientOptions = {
    ...(options.options as import('ioredis').RedisOptions | undefined),
    lazyConnect: true,
    connectTimeout: serverTimeoutMs,
    commandTimeout: serverTimeoutMs,
    maxRetriesPerRequest: 0,
    retryStrategy: () => null,
  };
  const client = options.url ? new Redis(options.url, clientOptions) : new Redis(clientOptions);
  // Kept for the report: without retries, connect() itself only says "Connection is closed".
  let lastError: Error | undefined;
  client.on('error', (error: Error) => (lastError = error));
  try {
    await client.connect();
  } catch (error) {
    client.disconnect();
    throw lastError ?? error;
  }
  return { servers: [{ server: address, caller: client as unknown as RedisCaller }], close: () => client.disconnect() };
}
