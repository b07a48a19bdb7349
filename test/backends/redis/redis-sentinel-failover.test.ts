import assert from 'node:assert/strict';
import { afterEach, describe, it } from 'node:test';
import type { LockService } from '../../../lib';
import { createRedisBackend } from '../../../lib/backends/redis/redis.backend';
import { RedisSentinelGroup } from '../../../servers/redis-sentinel';
import { FailoverHolders, msAfter, queuedBehind, type HolderRun } from '../../support/failover-holders';
import { lockServiceOver } from '../../support/lock-service-factory';
import { assertExclusive, FAULT_SUITE_TIMEOUT_MS, sleep } from '../../support/timing';

/**
 * The lease of every process: long enough to outlast the failover (the primary taken for down
 * after 500 ms, the replica promoted about a second later, and ioredis' next reconnection
 * attempt, at most about a second apart: 1.8-3.2 s in all, measured) with room to spare, since a
 * lease renewed just before the kill lasts only two thirds of it after: what is measured is the
 * failover, not an expiry.
 */
const TTL_MS = 8_000;
/** Timer lateness, the safety net's check and a round trip on a loaded 2-core machine. */
const BOUND_MS = 1_000;
/** From the promotion to a process's reconnection: ioredis' attempts come at most 1 s (+ 100 ms of jitter) apart. */
const RECONNECTION_MS = 1_100;

/**
 * A primary, its replica and a sentinel (servers/redis-sentinel.ts), the primary SIGKILLed while
 * locks are held and waiters are queued in other processes, each connected through the sentinel
 * (`options: { sentinels, name }`). Every process's critical sections (grant to handler end or
 * lost signal) are recorded on the one monotonic clock they share.
 */
describe('Redis backend behind Sentinel, its primary killed', { timeout: FAULT_SUITE_TIMEOUT_MS }, () => {
  let group: RedisSentinelGroup | undefined;
  const holders = new FailoverHolders(() => ({ backend: { type: 'redis', options: group!.connection }, ttlMs: TTL_MS, serverTimeoutMs: 30_000 }));
  const services: LockService[] = [];
  afterEach(async () => {
    await holders.stop();
    await Promise.all(services.splice(0).map((service) => service.onApplicationShutdown()));
    await group?.stop();
    group = undefined;
  });

  /**
   * Five processes: p0 holds `kept` for `holdMs`, across the failover, with p1 and p2 queued behind it; p3 holds
   * `handover` until 100 ms after the kill (its release falls in the failover) with p4 queued.
   * Resolves once the primary was killed, the replica promoted and every process done.
   * `lagging`: `kept` is taken and released once, and the replica catches up with that (so it
   * has the name's fence counter, which then falls behind), then it is cut off from the primary
   * before the locks (see cutReplication); else the replica has caught up at the kill.
   */
  async function failover({ lagging, holdMs }: { lagging: boolean; holdMs: number }) {
    group = await RedisSentinelGroup.start();
    // The ttl of every process: this one too takes part (in `lagging`), so it would close the promoted replica for its own ttl.
    const look = lockServiceOver(await createRedisBackend({ type: 'redis', options: group.connection }, { ttlMs: TTL_MS, serverTimeoutMs: 5_000 }));
    services.push(look);
    const [p0, p1, p2, p3, p4] = await holders.start(5);
    if (lagging) {
      await look.withLock('kept', () => undefined, { ttlMs: TTL_MS });
      await group.untilReplicaCaughtUp(5_000);
      await group.cutReplication();
    }
    const holder = holders.withLock(p0, 'p0 (holder at the kill)', 'kept', holdMs);
    await holder.entered;
    const keptWaiters = [holders.withLock(p1, 'p1 (queued)', 'kept', 200), holders.withLock(p2, 'p2 (queued)', 'kept', 200)];
    const leaving = holders.withLock(p3, 'p3 (releases during the failover)', 'handover', 2_000);
    const leavingStart = BigInt((await leaving.entered).at);
    const next = holders.withLock(p4, 'p4 (queued)', 'handover', 200);
    await Promise.all([queuedBehind(look, 'kept', 2), queuedBehind(look, 'handover', 1)]);
    if (!lagging) await group.untilReplicaCaughtUp(5_000);
    const killAt = leavingStart + 1_900_000_000n;
    assert.ok(process.hrtime.bigint() < killAt - 50_000_000n, 'setting up took longer than p3 holds: no release falls in the failover');
    await sleep(Number(killAt - process.hrtime.bigint()) / 1e6);

    const killedAt = process.hrtime.bigint();
    await group.primary.server.stop('SIGKILL');
    await group.untilPrimaryIs(group.replica.port, 20_000);
    const promotedAfterMs = msAfter(process.hrtime.bigint(), killedAt);
    const runs = [holder, ...keptWaiters, leaving, next];
    const outcomes = await Promise.all(runs.map((run) => run.done));
    const firstGrant = (of: HolderRun[]) => Math.min(...of.flatMap((run) => run.sections().map((section) => msAfter(section.start, killedAt))));
    return { holder, keptWaiters, leaving, next, outcomes, killedAt, promotedAfterMs, firstGrant };
  }

  it('the replica had every write: locks and queues are kept, and a release sent during the failover reaches the next waiter once its process reconnects', async (t) => {
    const { holder, keptWaiters, leaving, next, outcomes, killedAt, promotedAfterMs, firstGrant } = await failover({ lagging: false, holdMs: 6_000 });
    const [held] = holder.sections();
    const heldForMs = msAfter(held.end, BigInt(held.start));
    const handOnAfterMs = firstGrant(keptWaiters) - msAfter(held.end, killedAt);
    const leftAtMs = msAfter(leaving.sections()[0].end, killedAt);
    const nextGrantMs = firstGrant([next]);
    const nextBoundMs = promotedAfterMs + RECONNECTION_MS + BOUND_MS;
    t.diagnostic(
      `ttl ${TTL_MS} ms; replica promoted ${promotedAfterMs.toFixed(0)} ms after the kill; p0 held ${heldForMs.toFixed(0)} of its ${holder.holdMs} ms ` +
        `(kept: ${!outcomes[0].error}), the next waiter granted ${handOnAfterMs.toFixed(0)} ms after its section ended (bound ${BOUND_MS} ms); ` +
        `p3's section ended ${leftAtMs.toFixed(0)} ms after the kill, p4 granted ${nextGrantMs.toFixed(0)} ms after the kill ` +
        `(bound: the promotion + a reconnection + ${BOUND_MS} ms = ${nextBoundMs.toFixed(0)} ms)`,
    );
    assert.deepEqual(
      outcomes.map((outcome) => outcome.error),
      [undefined, undefined, undefined, undefined, undefined],
      'a lock was lost, or a wait failed, across the failover',
    );
    // Told by the child, not judged by the section's length: its timer counts from the event
    // loop's cached clock, so a full section can measure a fraction of a millisecond short.
    assert.equal(held.cutShort, false, `p0's section was cut short by a lost signal after ${heldForMs} ms`);
    assert.ok(handOnAfterMs <= BOUND_MS, `p0's next waiter was granted ${handOnAfterMs} ms after p0 let go`);
    // No overlap of live holds, and tokens strictly increasing, on each name.
    assertExclusive(holders.intervals([holder, ...keptWaiters]));
    assertExclusive(holders.intervals([leaving, next]));
    // The release was sent while no primary answered; p3's process sends it again once it has
    // reconnected to the new primary, which hands the name to p4 (not p3's lease running out).
    assert.ok(nextGrantMs <= nextBoundMs, `p4 granted ${nextGrantMs} ms after the kill`);
  });

  it('the replica had missed the locks (cut off before them): every process that took part closes the promoted replica to grants for a ttl; the holder is told before anyone else is granted, and tokens keep increasing', async (t) => {
    const { holder, keptWaiters, leaving, next, outcomes, promotedAfterMs, firstGrant, killedAt } = await failover({ lagging: true, holdMs: 2 * TTL_MS });
    const [held] = holder.sections();
    const lostAtMs = msAfter(held.end, killedAt);
    const otherGrantMs = firstGrant(keptWaiters);
    const nextGrantMs = firstGrant([next]);
    const grantBoundMs = promotedAfterMs + RECONNECTION_MS + TTL_MS + BOUND_MS;
    const tokens = holders
      .intervals([holder, ...keptWaiters])
      .sort((a, b) => (a.start < b.start ? -1 : 1))
      .map((interval) => interval.fencingToken);
    t.diagnostic(
      `ttl ${TTL_MS} ms; replica promoted ${promotedAfterMs.toFixed(0)} ms after the kill; p0's lost signal ${lostAtMs.toFixed(0)} ms after the kill ` +
        `(${outcomes[0].error?.reason}; bound: the ttl), first other holder of "kept" granted ${otherGrantMs.toFixed(0)} ms after the kill ` +
        `(${otherGrantMs >= lostAtMs ? `${(otherGrantMs - lostAtMs).toFixed(0)} ms after the lost signal` : `${(lostAtMs - otherGrantMs).toFixed(0)} ms BEFORE the lost signal: two holders`}); ` +
        `p4 granted ${nextGrantMs.toFixed(0)} ms after the kill (bound for both grants: the promotion + a reconnection + the ttl + ${BOUND_MS} ms = ${grantBoundMs.toFixed(0)} ms); ` +
        `tokens of "kept" in grant order ${tokens.join(', ')}`,
    );
    assert.equal(outcomes[0].error?.reason, 'renewal-refused', `p0's withLock ended with ${JSON.stringify(outcomes[0])}`);
    assert.ok(lostAtMs < TTL_MS, `p0 was told ${lostAtMs} ms after the kill`);
    assert.deepEqual(outcomes.slice(1).map((outcome) => outcome.error), [undefined, undefined, undefined, undefined], 'a wait failed after the failover');
    assert.equal(leaving.sections().length + next.sections().length, 2);
    // The lost signal fires before the lock can be granted to anyone else, and no fence goes back
    // (the promoted replica's counter of "kept" was behind the one p0's token came from).
    assertExclusive(holders.intervals([holder, ...keptWaiters]));
    assertExclusive(holders.intervals([leaving, next]));
    assert.ok(otherGrantMs <= grantBoundMs && nextGrantMs <= grantBoundMs, `granted ${otherGrantMs} and ${nextGrantMs} ms after the kill`);
  });
});
