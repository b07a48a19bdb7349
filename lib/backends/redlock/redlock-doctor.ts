import type { BackendSettings } from '../backend-definition';
import { Diagnosis, type DoctorReport } from '../backend-doctor';
import { redisAddress } from '../redis/redis-address';
import { checkRedisDeployment } from '../redis/redis-doctor';
import type { RedisBackendOptions } from '../redis/redis-options';
import type { RedisIdentity } from '../redis/redis-server-checks';
import type { RedlockBackendOptions } from './redlock-options';

/**
 * Each master as a Redis server, then what only the set of them shows: masters that are one
 * server under two addresses (the same run_id), or in one replication group (the same
 * master_replid: a primary and its replica, or two replicas of one primary). Either way one
 * failure takes out several votes, and a majority of them no longer outvotes a lost lock.
 */
export async function doctorRedlock(options: RedlockBackendOptions, settings: BackendSettings): Promise<DoctorReport> {
  const masters: RedisBackendOptions[] = options.clients
    ? options.clients.map((client) => ({ type: 'redis', client }))
    : options.urls!.map((url) => ({ type: 'redis', url, ...(options.options ? { options: options.options } : {}) }));
  // A URL names its db: two masters that differ only by it are the mistake to show.
  const labels = options.urls ? options.urls.map(urlLabel) : masters.map(redisAddress);
  const diagnosis = new Diagnosis('redlock', labels.join(', '));
  const identities = (await Promise.all(masters.map((master, index) => checkRedisDeployment(master, settings, diagnosis, labels[index])))).flat();
  checkIndependence(diagnosis, identities, masters.length);
  return diagnosis.report();
}

function checkIndependence(diagnosis: Diagnosis, identities: RedisIdentity[], count: number): void {
  const sameServer = groupsBy(identities, (identity) => identity.runId);
  const sameGroup = replicationGroups(identities).filter((group) => !sameServer.some((same) => sameMembers(same, group)));
  const majority = Math.floor(count / 2) + 1;
  for (const group of sameServer) {
    const names = group.map((identity) => identity.server).join(' and ');
    diagnosis.find({
      check: 'redlock-independence',
      severity: 'error',
      server: names,
      found: `masters ${names} are one server (run_id ${group[0].runId})`,
      consequence: `it casts ${group.length} of the ${majority} votes a majority of ${count} needs: its restart or loss alone can hand a held lock to a second holder`,
      fix: 'list each independent Redis server once in backend.urls (a different db number or host name for the same server is the same master)',
    });
  }
  for (const group of sameGroup) {
    const names = group.map((identity) => `${identity.server} (${identity.role === 'slave' ? `replica of ${identity.primary}` : 'primary'})`).join(', ');
    diagnosis.find({
      check: 'redlock-independence',
      severity: 'error',
      server: group.map((identity) => identity.server).join(' and '),
      found: `masters ${names} replicate each other`,
      consequence: `replication is asynchronous: a failover or resync among them moves or loses a grant on ${group.length} votes at once, so a majority of ${count} is not independent votes`,
      fix: 'use independent Redis servers as Redlock masters: no replicaof between them; for a replicated Redis use the redis backend instead',
    });
  }
  if (identities.length === count && sameServer.length === 0 && sameGroup.length === 0) diagnosis.pass('every master', `${count} independent masters (distinct run_id and replication id)`);
}

/** A master's URL without its scheme and credentials: 'host:port' or 'host:port/db'. */
function urlLabel(url: string): string {
  return url.replace(/^rediss?:\/\//i, '').replace(/^[^@/]*@/, '').replace(/\/$/, '');
}

/**
 * Masters in one replication group: the same master_replid (a replica that has synced), or a
 * replica naming another master's address as its primary (one still syncing, or cut off).
 */
function replicationGroups(identities: RedisIdentity[]): RedisIdentity[][] {
  const groupOf = new Map<RedisIdentity, RedisIdentity[]>(identities.map((identity) => [identity, [identity]]));
  const join = (a: RedisIdentity, b: RedisIdentity) => {
    const [first, second] = [groupOf.get(a)!, groupOf.get(b)!];
    if (first === second) return;
    first.push(...second);
    for (const member of second) groupOf.set(member, first);
  };
  const hostPort = (server: string) => server.replace(/\/\d+$/, '');
  for (const a of identities) {
    for (const b of identities) {
      if (a === b) continue;
      if ((a.replicationId !== undefined && a.replicationId === b.replicationId) || (a.primary !== undefined && a.primary === hostPort(b.server))) join(a, b);
    }
  }
  return [...new Set(groupOf.values())].filter((group) => group.length > 1);
}

/** Groups of two or more identities sharing a defined `key`. */
function groupsBy(identities: RedisIdentity[], key: (identity: RedisIdentity) => string | undefined): RedisIdentity[][] {
  const groups = new Map<string, RedisIdentity[]>();
  for (const identity of identities) {
    const value = key(identity);
    if (value !== undefined) groups.set(value, [...(groups.get(value) ?? []), identity]);
  }
  return [...groups.values()].filter((group) => group.length > 1);
}

function sameMembers(a: RedisIdentity[], b: RedisIdentity[]): boolean {
  return a.length === b.length && a.every((identity) => b.includes(identity));
}
