import assert from 'node:assert/strict';
import { after, afterEach, before, describe, it } from 'node:test';
import type { LockService } from '../../../lib';
import { createEtcdBackend } from '../../../lib/backends/etcd/etcd.backend';
import { EtcdCluster } from '../../support/etcd-server';
import { lockServiceOver } from '../../support/lock-service-factory';
import { abortedWithin, assertExclusive, sleep, type HoldInterval } from '../../support/timing';

/**
 * A 3-member etcd on loopback (elections after 500 ms of silence, see etcd-server.ts). Each
 * LockService stands for a process, with its own client to all three members.
 */
describe('etcd backend on a 3-member cluster', () => {
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
  });
  after(() => cluster?.stop());

  it('keeps one holder at a time and the queue moving when the leader is killed', async (t) => {
    const key = `failover-${process.pid}`;
    const clients = [service(5_000), service(5_000), service(5_000)];
    const intervals: HoldInterval[] = [];
    let inside = 0;
    const workers = Array.from({ length: 12 }, (_, i) =>
      clients[i % 3].withLock(
        key,
        async (lock) => {
          const start = process.hrtime.bigint();
          assert.equal(++inside, 1, 'two holders inside at once');
          await sleep(40);
          inside--;
          intervals.push({ start, end: process.hrtime.bigint(), fencingToken: lock.fencingToken, holder: `worker ${i}` });
        },
        { waitTimeoutMs: 30_000 },
      ),
    );
    while (intervals.length < 3) await sleep(5);
    const leader = await cluster.leaderIndex();
    await cluster.kill(leader);
    await Promise.all(workers);
    assert.equal(intervals.length, 12, 'the queue stopped after the leader was killed');
    assertExclusive(intervals);
    const gaps = intervals.slice(1).map((interval, i) => Number(interval.start - intervals[i].end) / 1e6);
    const longestGapMs = Math.max(...gaps);
    t.diagnostic(`longest hand-off gap across the leader kill: ${longestGapMs.toFixed(0)} ms`);
    // A new leader in about two election timeouts; the clients fail over on their next call.
    assert.ok(longestGapMs < 8_000, `the queue stalled ${longestGapMs} ms`);
    await cluster.revive(leader);
    await cluster.waitHealthy(20_000);
  });

  it('without quorum: holders are lost by their deadline, nothing is granted until quorum returns', async (t) => {
    const key = `quorum-${process.pid}`;
    const [holderSide, waiterSide] = [service(15_000), service(15_000)];
    const ttlMs = 2_000;
    const holder = await holderSide.acquire(key, { ttlMs });
    const tokenHeld = holder.fencingToken;
    let grantedAt = 0;
    const waiter = waiterSide.acquire(key, { waitTimeoutMs: 40_000 }).then((lock) => {
      grantedAt = Date.now();
      return lock;
    });
    await sleep(200);
    const leader = await cluster.leaderIndex();
    const victims = [leader, (leader + 1) % 3];
    const cutAt = Date.now();
    await Promise.all(victims.map((index) => cluster.kill(index)));

    // The last renewal was confirmed before the cut, so the local deadline is at most ttlMs away.
    await abortedWithin(holder.signal, ttlMs + 200);
    const lostAfterMs = Date.now() - cutAt;
    assert.ok(lostAfterMs <= ttlMs + 100, `the holder's signal fired ${lostAfterMs} ms after quorum was lost`);
    await sleep(3_000);
    assert.equal(grantedAt, 0, 'a lock was granted without quorum');

    const restoredAt = Date.now();
    await cluster.revive(victims[0]);
    const next = await waiter;
    const grantedAfterMs = grantedAt - restoredAt;
    assert.ok(grantedAt >= restoredAt, 'granted before quorum returned');
    assert.ok(next.fencingToken > tokenHeld);
    t.diagnostic(`holder lost ${lostAfterMs} ms after the cut; waiter granted ${grantedAfterMs} ms after a member came back`);
    assert.ok(grantedAfterMs < 15_000, `the waiter got the lock only ${grantedAfterMs} ms after quorum returned`);
    await next.release();
    await holder.release();
    await cluster.revive(victims[1]);
    await cluster.waitHealthy(20_000);
  });
});
