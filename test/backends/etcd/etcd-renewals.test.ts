import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { Etcd3 } from 'etcd3';
import type { LockHandle, LockService } from '../../../lib';
import { contenderRange } from '../../../lib/backends/etcd/etcd-keys';
import { createEtcdBackend, type EtcdLockBackend } from '../../../lib/backends/etcd/etcd.backend';
import { EtcdCluster } from '../../../servers/etcd-server';
import { lockServiceOver } from '../../support/lock-service-factory';
import { sleep } from '../../support/timing';
import { timerLateness } from './etcd-test-kit';

/**
 * Leases come due on a grid of eighths of an interval (nextRenewal), and locks taken over a whole
 * interval (1,000 etcd acquisitions take about one here) spread over all eight: each eighth sends
 * its full transactions of 128 and one partial. So a renewal interval costs at most HELD / 128 + 8
 * transactions, within the bound of HELD / 100 from 3,700 held locks up, whatever the spread
 * (1,000 spread over the grid measured 1.1-1.2 per 100; see docs/etcd.md).
 */
const HELD = 5_000;
const TTL_MS = 3_000;
/** LockLease renews at a third of the ttl. */
const INTERVAL_MS = TTL_MS / 3;

describe('lease renewals on etcd are batched', () => {
  let cluster: EtcdCluster;
  let admin: Etcd3;
  let backend: EtcdLockBackend;
  let service: LockService;
  const held: LockHandle[] = [];

  before(async () => {
    cluster = await EtcdCluster.start(1);
    admin = new Etcd3({ hosts: cluster.hosts });
    backend = createEtcdBackend({ type: 'etcd', hosts: cluster.hosts });
    // No key prefix: the test deletes a lock's key by its name, as an operator's `etcdctl del` would.
    service = lockServiceOver(backend, { keyPrefix: '' });
  });
  after(async () => {
    // Closing revokes the session, which deletes every key at once rather than in 5,000 releases.
    await backend?.close();
    await service?.onApplicationShutdown();
    admin?.close();
    await cluster?.stop();
  });

  it(`${HELD} held locks renew with at most one request per 100 locks per interval, and stay held`, async (t) => {
    for (let from = 0; from < HELD; from += 250) {
      held.push(...(await Promise.all(Array.from({ length: 250 }, (_, i) => service.acquire(`renew-${from + i}`, { ttlMs: TTL_MS })))));
    }
    const before = await cluster.messagesReceived();
    const started = performance.now();
    await sleep(3 * INTERVAL_MS);
    const intervals = (performance.now() - started) / INTERVAL_MS;
    const after = await cluster.messagesReceived();
    // Every message etcd received meanwhile: the renewals' transactions, and the session's keepalives.
    const requests = after.total - before.total;
    const txns = (after.byMethod.Txn ?? 0) - (before.byMethod.Txn ?? 0);
    const perHundredPerInterval = requests / intervals / (HELD / 100);
    t.diagnostic(
      `${requests} gRPC messages (${txns} transactions) in ${intervals.toFixed(2)} renewal intervals for ${HELD} locks: ` +
        `${perHundredPerInterval.toFixed(2)} per 100 locks per interval (bound 1; one transaction per lock: 100)`,
    );
    assert.ok(txns > 0, 'no renewal at all');
    assert.ok(perHundredPerInterval <= 1, `${perHundredPerInterval.toFixed(2)} requests per 100 locks per interval`);
    assert.deepEqual(held.filter((handle) => !handle.isHeld).map((handle) => handle.key), []);
  });

  it('locks taken away inside a batch (forceRelease, a raw delete) lose their lease alone: the others stay held', async (t) => {
    const forced = held[HELD / 4];
    const deleted = held[(3 * HELD) / 4];
    const lostAt = (handle: LockHandle) => new Promise<number>((resolve) => handle.signal.addEventListener('abort', () => resolve(performance.now()), { once: true }));
    const lost = Promise.all([lostAt(forced), lostAt(deleted)]);
    const lateness = timerLateness();
    const removedAt = performance.now();
    assert.equal(await service.forceRelease(forced.key), true);
    await admin.delete().prefix(contenderRange(deleted.key).start);
    const lostAfterMs = (await lost).map((at) => at - removedAt);
    // The next renewal, its round trip, and how late this process's timers ran meanwhile.
    const boundMs = INTERVAL_MS + 500 + lateness.stop();
    t.diagnostic(`lost signals fired ${lostAfterMs.map((ms) => ms.toFixed(0)).join(' and ')} ms after the keys went (bound: one interval + 500 ms + timer lateness = ${boundMs} ms)`);
    for (const ms of lostAfterMs) assert.ok(ms <= boundMs, `${ms} ms`);
    assert.equal(forced.signal.reason.reason, 'renewal-refused');
    await sleep(INTERVAL_MS);
    assert.deepEqual(held.filter((handle) => handle !== forced && handle !== deleted && !handle.isHeld).map((handle) => handle.key), []);
  });
});
