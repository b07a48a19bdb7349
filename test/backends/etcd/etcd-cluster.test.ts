import assert from 'node:assert/strict';
import { after, afterEach, before, describe, it } from 'node:test';
import { Etcd3 } from 'etcd3';
import type { LockService } from '../../../lib';
import { createEtcdBackend, type EtcdLockBackend } from '../../../lib/backends/etcd/etcd.backend';
import { EtcdCluster } from '../../../servers/etcd-server';
import { lockServiceOver } from '../../support/lock-service-factory';
import { abortedWithin, assertExclusive, FAULT_SUITE_TIMEOUT_MS, sleep, type HoldInterval } from '../../support/timing';
import { request, timerLateness } from './etcd-test-kit';

/**
 * An etcd3 client that records on which member each Lease call or stream was opened (etcd3
 * picks one at random per call): the last one, once a session is up, carries its keepalive
 * stream. Reaches into etcd3's connection pool, which has no public hook for this.
 */
function leaseHostsRecorded(hosts: string[]): { client: Etcd3; leaseHosts: string[] } {
  const client = new Etcd3({ hosts });
  const leaseHosts: string[] = [];
  type Connection = { resource: { host: string } };
  const pool = (client as unknown as { pool: { withConnection(service: string, fn: (c: Connection) => unknown, hosts?: unknown): unknown } }).pool;
  const withConnection = pool.withConnection.bind(pool);
  pool.withConnection = (service, fn, shuffled) =>
    withConnection(
      service,
      (connection) => {
        if (service === 'Lease') leaseHosts.push(connection.resource.host);
        return fn(connection);
      },
      shuffled,
    );
  return { client, leaseHosts };
}

/**
 * A 3-member etcd on loopback (elections after 500 ms of silence, see etcd-server.ts). Each
 * LockService stands for a process, with its own client to all three members.
 */
describe('etcd backend on a 3-member cluster', { timeout: FAULT_SUITE_TIMEOUT_MS }, () => {
  let cluster: EtcdCluster;
  const services: LockService[] = [];
  const service = (sessionTtlMs: number) => {
    const created = lockServiceOver(createEtcdBackend({ type: 'etcd', hosts: cluster.hosts, sessionTtlMs }));
    services.push(created);
    return created;
  };

  before(async () => {
    cluster = await EtcdCluster.start(3);
  });
  afterEach(async () => {
    await Promise.all(services.splice(0).map((s) => s.onApplicationShutdown()));
    await cluster.restore();
  });
  after(() => cluster?.stop());

  it('keeps one holder at a time and the queue moving when the leader is killed', async (t) => {
    const key = `failover-${process.pid}`;
    const clients = [service(5_000), service(5_000), service(5_000)];
    const leader = await cluster.leaderIndex();
    const intervals: HoldInterval[] = [];
    let inside = 0;
    let killedAt: bigint | undefined;
    let killing: Promise<void> | undefined;
    const workers = Array.from({ length: 12 }, (_, i) =>
      clients[i % 3].withLock(
        key,
        async (lock) => {
          const start = process.hrtime.bigint();
          assert.equal(++inside, 1, 'two holders inside at once');
          // The third holder kills the leader from inside its critical section: a lock is held
          // at that moment, and the other holders are queued behind it.
          if (intervals.length === 2 && !killing) {
            killedAt = process.hrtime.bigint();
            killing = cluster.kill(leader);
          }
          await sleep(40);
          inside--;
          intervals.push({ start, end: process.hrtime.bigint(), fencingToken: lock.fencingToken, holder: `worker ${i}` });
        },
        { waitTimeoutMs: 30_000 },
      ),
    );
    await Promise.all(workers);
    await killing;
    assert.ok(killedAt !== undefined, 'the leader was never killed');
    assert.ok(
      intervals.some((interval) => interval.start <= killedAt! && killedAt! <= interval.end),
      'no lock was held when the leader was killed',
    );
    assert.equal(intervals.length, 12, 'the queue stopped after the leader was killed');
    assertExclusive(intervals);
    const gaps = intervals.slice(1).map((interval, i) => Number(interval.start - intervals[i].end) / 1e6);
    const longestGapMs = Math.max(...gaps);
    t.diagnostic(`longest hand-off gap across the leader kill: ${longestGapMs.toFixed(0)} ms`);
    // A new leader in about two election timeouts; the clients fail over on their next call.
    assert.ok(longestGapMs < 8_000, `the queue stalled ${longestGapMs} ms`);
  });

  it('without quorum: holders are lost by their deadline, nothing is granted until quorum returns, not even in the holder\'s process', async (t) => {
    const key = `quorum-${process.pid}`;
    const [holderSide, waiterSide] = [service(15_000), service(15_000)];
    const ttlMs = 2_000;
    const holder = await holderSide.acquire(key, { ttlMs });
    const tokenHeld = holder.fencingToken;
    const grantedAt = new Map<string, number>();
    const waitOn = (side: LockService, who: string) =>
      side.acquire(key, { waitTimeoutMs: 40_000 }).then((lock) => {
        grantedAt.set(who, Date.now());
        return lock;
      });
    // Right behind the holder, in its process: the waiter a hand-over inside the process would reach.
    const sameProcess = waitOn(holderSide, 'same process');
    await sleep(100);
    const otherProcess = waitOn(waiterSide, 'other process');
    await sleep(200);
    const leader = await cluster.leaderIndex();
    const victims = [leader, (leader + 1) % 3];
    const lateness = timerLateness();
    const cutAt = Date.now();
    await Promise.all(victims.map((index) => cluster.kill(index)));

    // The last renewal was confirmed before the cut, so the local deadline is at most ttlMs away;
    // its timer fires at most as late as this process's timers ran (measured).
    await abortedWithin(holder.signal, ttlMs + 5_000);
    const lostAfterMs = Date.now() - cutAt;
    const lateMs = lateness.stop();
    assert.ok(lostAfterMs <= ttlMs + 100 + lateMs, `the holder's signal fired ${lostAfterMs} ms after quorum was lost (timers up to ${lateMs} ms late)`);
    await sleep(3_000);
    assert.deepEqual([...grantedAt.keys()], [], 'a lock was granted without quorum');

    const restoredAt = Date.now();
    await cluster.revive(victims[0]);
    // The holder's delete goes through once quorum is back: the waiter behind it is next.
    const next = await sameProcess;
    const grantedAfterMs = grantedAt.get('same process')! - restoredAt;
    assert.ok(grantedAfterMs >= 0, 'granted before quorum returned');
    assert.ok(next.fencingToken > tokenHeld);
    t.diagnostic(`holder lost ${lostAfterMs} ms after the cut (timers up to ${lateMs} ms late); next waiter granted ${grantedAfterMs} ms after a member came back`);
    assert.ok(grantedAfterMs < 15_000, `the waiter got the lock only ${grantedAfterMs} ms after quorum returned`);
    assert.equal(grantedAt.has('other process'), false, 'the waiter of another process overtook the queue');
    await next.release();
    const last = await otherProcess;
    assert.ok(last.fencingToken > next.fencingToken);
    await last.release();
    await holder.release();
  });

  it('keeps its session when the member carrying the keepalive stream stalls while the cluster stays healthy', async (t) => {
    const sessionTtlMs = 3_000;
    const hostIndex = (host: string) => cluster.hosts.findIndex((url) => new URL(url).host === host);
    // Stall a follower, so that the cluster keeps its leader: find a session whose stream is on one.
    let setup: { client: Etcd3; locks: EtcdLockBackend; streamOn: number } | undefined;
    for (let attempt = 0; attempt < 20 && !setup; attempt++) {
      const { client, leaseHosts } = leaseHostsRecorded(cluster.hosts);
      const locks = createEtcdBackend({ type: 'etcd', client, sessionTtlMs });
      await locks.release((await locks.tryAcquire(request(`stall-probe-${attempt}`, 'o')))!);
      await sleep(100);
      const streamOn = hostIndex(leaseHosts[leaseHosts.length - 1]);
      if (streamOn !== (await cluster.leaderIndex())) setup = { client, locks, streamOn };
      else {
        await locks.close();
        client.close();
      }
    }
    assert.ok(setup, 'no session got its keepalive stream on a follower');
    const { client, locks, streamOn } = setup;
    const healthy = new Etcd3({ hosts: cluster.hosts.filter((_, i) => i !== streamOn) });
    try {
      const key = `stall-${process.pid}`;
      const grant = (await locks.tryAcquire(request(key, 'holder')))!;
      const [{ lease }] = (await healthy.getAll().prefix(`${key}/`).exec()).kvs;
      cluster.pause(streamOn);
      try {
        // Unhelped, the stream stays silent and etcd3 reconnects it only after a whole ttl of
        // silence, past the session's deadline: the lock would be lost about 3 s after the stall.
        await sleep(3 * sessionTtlMs);
        if (grant.lost.aborted) {
          const leader = await cluster.leaderIndex().catch((error: Error) => error.message);
          assert.fail(`the session was lost (member ${streamOn} stalled, leader now ${leader}): ${String(grant.lost.reason)}`);
        }
        const [kv] = (await healthy.getAll().prefix(`${key}/`).exec()).kvs;
        assert.equal(kv?.lease, lease, 'the lock key or its session lease is gone');
        const remaining = await healthy.leaseClient.leaseTimeToLive({ ID: lease });
        t.diagnostic(`keepalive stream's member stalled for ${3 * sessionTtlMs} ms: session kept, lease ttl left ${remaining.TTL} s`);
      } finally {
        cluster.resume(streamOn);
      }
    } finally {
      // Closing revokes the session, and with it the lock. (A release now could land on the member
      // just resumed, still catching up, and fail: not what this test is about.)
      await locks.close();
      client.close();
      healthy.close();
    }
  });
});
