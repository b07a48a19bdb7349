import assert from 'node:assert/strict';
import { after, afterEach, before, describe, it } from 'node:test';
import type { LockService } from '../../../lib';
import { createZooKeeperBackend } from '../../../lib/backends/zookeeper/create-zookeeper-backend';
import { ZooKeeperEnsemble } from '../../../servers/zookeeper-ensemble';
import { FailoverHolders, msAfter, queuedBehind, type HolderRun } from '../../support/failover-holders';
import { lockServiceOver } from '../../support/lock-service-factory';
import { assertExclusive, eventually, FAULT_SUITE_TIMEOUT_MS, sleep } from '../../support/timing';

/**
 * What the scheduling of a loaded 2-core machine may add to a bound: the server's expiry in
 * ticks (100 ms), the watch event, the reply, and timers that run late.
 */
const BOUND_MS = 1_500;
/** These processes must ride out the outage, not give up on it (zookeeper-unreachable.test.ts tests that). */
const SERVER_TIMEOUT_MS = 60_000;

/**
 * A 3-member ZooKeeper 3.8 ensemble on loopback (tickTime 100 ms, see zookeeper-ensemble.ts),
 * its leader SIGKILLed while locks are held and waiters are queued in other processes. Every
 * process's critical sections (from the grant to the handler's end or the lost signal) are
 * recorded on the one monotonic clock they share, and must never overlap.
 */
describe('ZooKeeper backend on a 3-member ensemble whose leader dies', { timeout: FAULT_SUITE_TIMEOUT_MS }, () => {
  let ensemble: ZooKeeperEnsemble;
  let sessionTimeoutMs = 0;
  const holders = new FailoverHolders(() => ({
    backend: { type: 'zookeeper', connectionString: ensemble.connectionString, sessionTimeoutMs },
    ttlMs: sessionTimeoutMs,
    serverTimeoutMs: SERVER_TIMEOUT_MS,
  }));
  const services: LockService[] = [];
  const inspector = () => {
    const service = lockServiceOver(createZooKeeperBackend({ type: 'zookeeper', connectionString: ensemble.connectionString }, { ttlMs: 30_000, serverTimeoutMs: 10_000 }));
    services.push(service);
    return service;
  };

  before(async () => {
    ensemble = await ZooKeeperEnsemble.start(3);
  });
  afterEach(async () => {
    await holders.stop();
    await Promise.all(services.splice(0).map((service) => service.onApplicationShutdown()));
    await ensemble.restore();
  });
  after(() => ensemble?.stop());

  /** When a member leads again after `from`, polled every 20 ms (never early, at most 20 ms late). */
  const nextLeader = async (from: bigint, dead: readonly number[]): Promise<number> => {
    await eventually(
      async () => (await Promise.all([0, 1, 2].filter((i) => !dead.includes(i)).map((i) => ensemble.role(i)))).includes('leader'),
      30_000,
      'a new leader',
      20,
    );
    return msAfter(process.hrtime.bigint(), from);
  };
  const grantsOf = (runs: HolderRun[]) => runs.flatMap((run) => run.sections().map((section) => ({ run, start: BigInt(section.start) })));

  it('the leader killed: sessions ride out the election, held locks and queues are kept, a release made during the election reaches the next waiter', async (t) => {
    sessionTimeoutMs = 4_000;
    const [p0, p1, p2, p3, p4] = await holders.start(5);
    const look = inspector();
    // `kept`: held across the election by p0, p1 and p2 queued behind it.
    const holder = holders.withLock(p0, 'p0 (holder at the kill)', 'kept', 4_000);
    await holder.entered;
    const keptWaiters = [holders.withLock(p1, 'p1 (queued)', 'kept', 200), holders.withLock(p2, 'p2 (queued)', 'kept', 200)];
    // `handover`: p3's section ends 100 ms after the kill, so its release falls in the election.
    const leaving = holders.withLock(p3, 'p3 (releases during the election)', 'handover', 2_000);
    await leaving.entered;
    const next = holders.withLock(p4, 'p4 (queued)', 'handover', 200);
    await Promise.all([queuedBehind(look, 'kept', 2), queuedBehind(look, 'handover', 1)]);
    const leavingStart = BigInt((await leaving.entered).at);
    const killAt = leavingStart + 1_900_000_000n;
    assert.ok(process.hrtime.bigint() < killAt - 50_000_000n, 'setting up took longer than p3 holds: no release falls in the election');
    await sleep(Number(killAt - process.hrtime.bigint()) / 1e6);

    const leader = await ensemble.leaderIndex();
    const killedAt = process.hrtime.bigint();
    await ensemble.kill(leader);
    const newLeaderAfterMs = await nextLeader(killedAt, [leader]);
    const outcomes = await Promise.all([holder, ...keptWaiters, leaving, next].map((run) => run.done));

    const keptIntervals = holders.intervals([holder, ...keptWaiters]);
    const handoverIntervals = holders.intervals([leaving, next]);
    const [held] = holder.sections();
    const heldForMs = msAfter(held.end, BigInt(held.start));
    const nextGrantAfterMs = msAfter(next.sections()[0].start, killedAt);
    const releasedAfterMs = msAfter(leaving.sections()[0].end, killedAt);
    const handOnAfterMs = Math.min(...grantsOf(keptWaiters).map(({ start }) => msAfter(start, BigInt(held.end))));
    t.diagnostic(
      `session timeout ${sessionTimeoutMs} ms; new leader ${newLeaderAfterMs.toFixed(0)} ms after the kill; ` +
        `p0 held ${heldForMs.toFixed(0)} of its ${holder.holdMs} ms (kept: ${!outcomes[0].error}); the next waiter granted ${handOnAfterMs.toFixed(0)} ms after its section ended; ` +
        `p3's section ended ${releasedAfterMs.toFixed(0)} ms after the kill, p4 granted ${nextGrantAfterMs.toFixed(0)} ms after the kill (bound ${sessionTimeoutMs} ms)`,
    );
    assert.deepEqual(
      outcomes.map((outcome) => outcome.error),
      [undefined, undefined, undefined, undefined, undefined],
      'a lock was lost, or a wait failed, across the leader change',
    );
    // Told by the child, not judged by the section's length: its timer counts from the event
    // loop's cached clock, so a full section can measure a fraction of a millisecond short.
    assert.equal(held.cutShort, false, `p0's section was cut short by a lost signal after ${heldForMs} ms`);
    assertExclusive(keptIntervals);
    assertExclusive(handoverIntervals);
    assert.equal(keptIntervals.length, 3);
    // The session survived, so the release reached the server once p3's client reconnected: within the session timeout.
    assert.ok(nextGrantAfterMs <= sessionTimeoutMs, `p4 granted ${nextGrantAfterMs} ms after the kill`);
  });

  it('the leader and a follower killed (no quorum): every holder is told within the session timeout, nothing is granted until a quorum is back', async (t) => {
    sessionTimeoutMs = 2_000;
    const [p0, p1, p2] = await holders.start(3);
    const holder = holders.withLock(p0, 'p0 (holder at the kill)', 'quorum', 60_000);
    await holder.entered;
    const waiters = [holders.withLock(p1, 'p1 (queued)', 'quorum', 200), holders.withLock(p2, 'p2 (queued)', 'quorum', 200)];
    await queuedBehind(inspector(), 'quorum', 2);

    const leader = await ensemble.leaderIndex();
    const victims = [leader, (leader + 1) % 3];
    const killedAt = process.hrtime.bigint();
    await Promise.all(victims.map((index) => ensemble.kill(index)));
    const outcome = await holder.done;
    const lostAfterMs = msAfter(holder.sections()[0].end, killedAt);
    // Well past the session timeout: had any session expired on the one member left, it would show now.
    await sleep(Math.max(0, sessionTimeoutMs + 1_000 - msAfter(process.hrtime.bigint(), killedAt)));
    const grantedWithoutQuorum = grantsOf(waiters).length;

    const reviveAt = process.hrtime.bigint();
    await ensemble.revive(victims[0]);
    const leadingAfterMs = await nextLeader(reviveAt, [victims[1]]);
    await Promise.all(waiters.map((run) => run.done));
    const grants = grantsOf(waiters).sort((a, b) => (a.start < b.start ? -1 : 1));
    const firstGrantAfterMs = msAfter(grants[0].start, reviveAt);
    t.diagnostic(
      `session timeout ${sessionTimeoutMs} ms; p0's lost signal ${lostAfterMs.toFixed(0)} ms after the kill (reason ${outcome.error?.reason}); ` +
        `${grantedWithoutQuorum} grants in ${sessionTimeoutMs + 1_000} ms without quorum; a member restarted: leader ${leadingAfterMs.toFixed(0)} ms, ` +
        `first waiter granted ${firstGrantAfterMs.toFixed(0)} ms after the restart began (the old sessions' one more timeout)`,
    );
    assert.equal(outcome.error?.name, 'LockLostError', `p0's withLock ended with ${JSON.stringify(outcome)}`);
    assert.ok(lostAfterMs <= sessionTimeoutMs + BOUND_MS, `p0 was told ${lostAfterMs} ms after the kill`);
    assert.equal(grantedWithoutQuorum, 0, 'a lock was granted without a quorum');
    assert.equal(grants.length, 2, 'a waiter was not served after the quorum came back');
    for (const run of waiters) assert.equal((await run.done).error, undefined, `${run.label}: ${JSON.stringify(await run.done)}`);
    // p0's section ends at its lost signal: the waiters' grants must come after it, with greater tokens.
    assertExclusive(holders.intervals([holder, ...waiters]));
  });
});
