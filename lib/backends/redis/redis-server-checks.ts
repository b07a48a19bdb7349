import type { Diagnosis } from '../backend-doctor';
import { checkClock } from '../clock-check';

/** ioredis' generic command call, on a Redis connection (ours, or a supplied client's). */
export interface RedisCaller {
  call(command: string, ...args: (string | number)[]): Promise<unknown>;
}

/** What the checks of one server learn that Redlock compares across its masters. */
export interface RedisIdentity {
  readonly server: string;
  readonly runId?: string;
  /** Shared by a master and its replicas (INFO replication master_replid): one replication group. */
  readonly replicationId?: string;
  readonly role?: string;
  /** A replica's primary, as it names it. */
  readonly primary?: string;
}

/**
 * Every check of one Redis server: eviction, persistence, replication, clock. CONFIG GET first;
 * where a managed Redis refuses it (renamed, or denied by ACL), INFO still tells the eviction
 * policy and whether AOF is on, and what neither tells is reported as not checked, never passed.
 */
export async function checkRedisServer(redis: RedisCaller, server: string, diagnosis: Diagnosis, ttlMs: number): Promise<RedisIdentity> {
  const info = parseInfo(String(await redis.call('INFO', 'all')));
  const configs = await readConfig(redis, ['maxmemory-policy', 'maxmemory', 'appendonly', 'appendfsync']);
  diagnosis.note(`${server}: redis ${info.redis_version ?? '?'}, role ${info.role ?? '?'}, run_id ${info.run_id ?? '?'}`);
  checkEviction(diagnosis, server, configs, info);
  checkPersistence(diagnosis, server, configs, info);
  checkReplication(diagnosis, server, info);
  const sentAt = Date.now();
  const [seconds, micros] = (await redis.call('TIME')) as [string, string];
  checkClock(diagnosis, server, Number(seconds) * 1000 + Number(micros) / 1000, sentAt, Date.now(), ttlMs);
  return {
    server,
    runId: info.run_id,
    replicationId: info.master_replid,
    role: info.role,
    primary: info.role === 'slave' ? `${info.master_host}:${info.master_port}` : undefined,
  };
}

type Config = { values: Record<string, string> } | { refused: string };

/** CONFIG GET, one parameter a call (Redis before 7 takes one); a refusal is kept as the reason. */
async function readConfig(redis: RedisCaller, names: string[]): Promise<Config> {
  const values: Record<string, string> = {};
  try {
    for (const name of names) {
      const reply = (await redis.call('CONFIG', 'GET', name)) as string[];
      for (let i = 0; i + 1 < reply.length; i += 2) values[reply[i]] = reply[i + 1];
    }
  } catch (error) {
    // A transport error is not a refusal: the whole check fails as unreachable.
    if (!/unknown command|NOPERM|no permissions|not allowed|disabled/i.test(String((error as Error).message))) throw error;
    return { refused: (error as Error).message };
  }
  return { values };
}

function checkEviction(diagnosis: Diagnosis, server: string, config: Config, info: Record<string, string>): void {
  // INFO memory has carried maxmemory_policy since Redis 4: readable where CONFIG is not.
  const policy = 'values' in config ? config.values['maxmemory-policy'] : info.maxmemory_policy;
  const maxmemory = 'values' in config ? config.values.maxmemory : info.maxmemory;
  if (policy === undefined) {
    return diagnosis.unchecked(
      'maxmemory-policy',
      server,
      `CONFIG GET was refused (${(config as { refused: string }).refused}) and INFO memory has no maxmemory_policy`,
      'ask your provider, or read it where CONFIG is allowed: it must be noeviction',
      'any policy but noeviction deletes lock keys under memory pressure',
    );
  }
  if (policy === 'noeviction') return diagnosis.pass(server, 'maxmemory-policy is noeviction');
  const unlimited = maxmemory === '0';
  diagnosis.find({
    check: 'maxmemory-policy',
    severity: unlimited ? 'warning' : 'error',
    server,
    found: `maxmemory-policy is ${policy} (maxmemory ${maxmemory ?? '?'}${unlimited ? ': no limit yet' : ''})`,
    consequence:
      'under memory pressure Redis deletes keys to make room, lock keys among them (they have a ttl): a lock is granted to another caller while its holder runs' +
      (policy.startsWith('allkeys') ? "; with allkeys-* the fence counter too (it has none), and fencing tokens start again from 1" : '') +
      (unlimited ? '; nothing is evicted until a maxmemory is set, which a provider or an operator may do at any time' : ''),
    fix: 'maxmemory-policy noeviction (redis.conf, or CONFIG SET maxmemory-policy noeviction; on a managed Redis, its parameter group): writes then fail with OOM, which the library reports, instead of dropping locks',
  });
}

function checkPersistence(diagnosis: Diagnosis, server: string, config: Config, info: Record<string, string>): void {
  // INFO persistence tells whether AOF is on; only CONFIG tells how often it is fsynced.
  const appendonly = 'values' in config ? config.values.appendonly : info.aof_enabled === undefined ? undefined : info.aof_enabled === '1' ? 'yes' : 'no';
  const refused = 'refused' in config ? `CONFIG GET was refused (${config.refused})` : '';
  const lost = 'grants and fence increments made since the last save are lost; a restarted server hands a held lock to the next caller at once, and tokens go back';
  if (appendonly === undefined) {
    return diagnosis.unchecked('appendonly', server, `${refused} and INFO persistence has no aof_enabled`, 'ask your provider whether AOF is on with appendfsync always', lost);
  }
  if (appendonly !== 'yes') {
    return diagnosis.find({
      check: 'appendonly',
      severity: 'error',
      server,
      found: 'appendonly is no (no AOF)',
      consequence: `a restart or crash loses every lock: ${lost}`,
      fix: 'appendonly yes and appendfsync always (redis.conf, or CONFIG SET appendonly yes, CONFIG SET appendfsync always, then CONFIG REWRITE)',
    });
  }
  diagnosis.pass(server, 'appendonly is yes');
  const fsync = 'values' in config ? config.values.appendfsync : undefined;
  if (fsync === undefined) {
    return diagnosis.unchecked('appendfsync', server, refused, 'ask your provider: it must be appendfsync always', 'with everysec or no, a machine crash loses the last grants and fence increments');
  }
  if (fsync === 'always') return diagnosis.pass(server, 'appendfsync is always');
  diagnosis.find({
    check: 'appendfsync',
    severity: fsync === 'everysec' ? 'warning' : 'error',
    server,
    found: `appendfsync is ${fsync}`,
    consequence:
      fsync === 'everysec'
        ? 'a machine crash or power loss (not a process crash) loses up to the last second or two of grants and fence increments: a restarted server may hand a held lock to another caller, and tokens may go back'
        : 'the OS decides when the AOF reaches the disk (often 30 s): a machine crash loses that much of grants and fence increments',
    fix: 'appendfsync always (redis.conf, or CONFIG SET appendfsync always, then CONFIG REWRITE)',
  });
}

function checkReplication(diagnosis: Diagnosis, server: string, info: Record<string, string>): void {
  if (info.role === 'slave') {
    return diagnosis.find({
      check: 'role',
      severity: 'error',
      server,
      found: `the server is a replica of ${info.master_host}:${info.master_port}`,
      consequence: 'a replica refuses the lock scripts (READONLY), or, with replica-read-only no, keeps locks that its primary and the other clients never see',
      fix: 'point the backend at the primary (its url, or ioredis sentinels + name so that a failover is followed)',
    });
  }
  const replicas = Number(info.connected_slaves ?? 0);
  if (replicas === 0) return diagnosis.pass(server, 'a primary without replicas');
  diagnosis.find({
    check: 'replication',
    severity: 'warning',
    server,
    found: `the primary has ${replicas} replica(s); replication is asynchronous`,
    consequence: 'a failover promotes a replica that may not have the latest grants: a held lock can be granted again, and a fence can go back',
    fix: 'min-replicas-to-write 1 with min-replicas-max-lag 1 (redis.conf) narrows the window without closing it; for locks that must survive a failover, use the redlock backend over independent masters, and fencing tokens on writes',
  });
}

/** `INFO`'s `field:value` lines, every section. */
function parseInfo(text: string): Record<string, string> {
  const fields: Record<string, string> = {};
  for (const line of text.split(/\r?\n/)) {
    const colon = line.indexOf(':');
    if (colon > 0 && !line.startsWith('#')) fields[line.slice(0, colon)] = line.slice(colon + 1);
  }
  return fields;
}
