import type { Etcd3 } from 'etcd3';
import type { BackendSettings } from '../backend-definition';
import { Diagnosis, type DoctorReport } from '../backend-doctor';
import { ATTEMPTS, createEtcdClient, suppliedClientAddress } from './etcd-client';
import { DEFAULT_ETCD_HOSTS, etcdAddress, type EtcdBackendOptions } from './etcd-options';

/**
 * Each member's version, from the maintenance Status API, against the etcd bugs that touch locks
 * and leases; and the one setting a client cannot read (lease checkpointing), reported as such.
 * Members are asked one by one: a cluster mid-upgrade runs several versions.
 */
export async function doctorEtcd(options: EtcdBackendOptions, settings: BackendSettings): Promise<DoctorReport> {
  const hosts = options.client ? undefined : [options.hosts ?? DEFAULT_ETCD_HOSTS].flat();
  const diagnosis = new Diagnosis('etcd', options.client ? suppliedClientAddress(options.client) : etcdAddress(hosts!));
  // As the backend bounds a call: every attempt of it within serverTimeoutMs in all.
  const attemptTimeoutMs = Math.max(500, Math.floor(settings.serverTimeoutMs / ATTEMPTS));
  const members = options.client
    ? [{ server: diagnosis.address!, client: options.client as unknown as Etcd3, owned: false }]
    : hosts!.map((host) => ({ server: etcdAddress(host), client: createEtcdClient(options, host, attemptTimeoutMs), owned: true }));
  let reached = false;
  for (const { server, client, owned } of members) {
    try {
      const status = await client.maintenance.status();
      reached = true;
      diagnosis.note(`${server}: etcd ${status.version}, member ${status.header.member_id}, leader ${status.leader}, raft term ${status.raftTerm}`);
      checkVersion(diagnosis, server, status.version);
    } catch (error) {
      diagnosis.unreachable(server, error);
    } finally {
      if (owned) client.close();
    }
  }
  if (reached) {
    diagnosis.unchecked(
      'lease-checkpoint',
      diagnosis.address!,
      'etcd does not tell a client whether lease checkpointing is on',
      'start every member with --experimental-enable-lease-checkpoint (etcd 3.5 and later: also --experimental-enable-lease-checkpoint-persist)',
      "without it a leader change restarts every lease's countdown: a dead holder's lock can outlive ttlMs by up to a ttl per leader change",
    );
    diagnosis.note('etcd has no clock a client can read: the clock check is not made');
  }
  return diagnosis.report();
}

type Version = readonly [major: number, minor: number, patch: number];

/** `version` comes before `fixed`. */
const before = ([major, minor, patch]: Version, [m, n, p]: Version) => major < m || (major === m && (minor < n || (minor === n && patch < p)));

/** The known etcd bugs that touch locks and leases, each with the releases it affects. */
const KNOWN_BUGS: readonly {
  readonly check: string;
  readonly affects: (version: Version) => boolean;
  readonly found: string;
  readonly consequence: string;
  readonly fix: string;
}[] = [
  {
    check: 'etcd-11456',
    affects: (version) => before(version, [3, 5, 0]),
    found: 'a lock can be granted after its lease expired during the wait (etcd-io/etcd#11456, fixed in 3.5.0 only)',
    consequence:
      "this library checks its own key after every wait, so its own locks are not affected; other clients sharing the lock names (Go's concurrency.Mutex, etcdctl lock, the v3lock API) can hold a lock whose lease is gone, alongside the next holder",
    fix: 'upgrade etcd to 3.5.0 or later (or make sure every client sharing the lock checks its own key after the wait)',
  },
  {
    check: 'etcd-17465',
    affects: (version) => before(version, [3, 4, 31]),
    found: 'a member that lost the leadership can still revoke leases (fixed in 3.4.31, etcd-io/etcd PR #17465)',
    consequence: "a live holder's session lease can be revoked: its locks are deleted and granted to others, and the holder learns of it only at its next keep-alive (its lost signal fires then)",
    fix: 'upgrade etcd to 3.4.31 or later',
  },
  {
    check: 'etcd-21423',
    affects: (version) => before(version, [3, 4, 42]),
    found: 'a member paused and resumed can serve stale reads (fixed in 3.4.42, etcd-io/etcd PR #21423)',
    consequence: "a waiter's check of the keys ahead of it can read a state that is gone: a lock can look free, or still held, for a moment after it changed",
    fix: 'upgrade etcd to 3.4.42 or later',
  },
];

function checkVersion(diagnosis: Diagnosis, server: string, version: string): void {
  const parsed = /^(\d+)\.(\d+)\.(\d+)/.exec(version);
  if (!parsed) return diagnosis.unchecked('version', server, `the version "${version}" is not major.minor.patch`, 'compare it with the etcd changelog', 'the known lock and lease bugs below cannot be ruled out');
  const [major, minor, patch] = parsed.slice(1).map(Number);
  const affecting = KNOWN_BUGS.filter((bug) => bug.affects([major, minor, patch]));
  for (const bug of affecting) diagnosis.find({ check: bug.check, severity: 'warning', server, found: `etcd ${version}: ${bug.found}`, consequence: bug.consequence, fix: bug.fix });
  if (affecting.length === 0) diagnosis.pass(server, `etcd ${version} has none of the known lock and lease bugs (#11456, PR #17465, PR #21423)`);
}
