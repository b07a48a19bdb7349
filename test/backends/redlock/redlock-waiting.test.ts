import assert from 'node:assert/strict';
import { Redis } from 'ioredis';
import { after, before, describe, it } from 'node:test';
import type { LockService } from '../../../lib';
import { commandsExecuted } from '../../../servers/redis-server';
import { RedisMasters } from '../../../servers/redis-masters';
import { DURABLE_REDIS_ARGS } from '../../../servers/redis-server';
import { assertExclusive, sleep, type HoldInterval } from '../../support/timing';
import { RedlockClients, newKey } from './redlock-test-kit';

const WAITERS = 12;
const HOLD_MS = 20;

/**
 * Waiting without polling: waiters of other clients (each its own waiter on the masters, as a
 * process is) are woken by the release, one at a time, not by timers and not all at once.
 */
describe('redlock waiting', () => {
  let masters: RedisMasters;
  const clients = new RedlockClients();
  let services: LockService[];
  let admin: Redis;

  before(async () => {
    // Restarted with their data in the resubscription case: a restart without it is quarantined for a ttl (redlock-restart.test.ts).
    masters = await RedisMasters.start(3, DURABLE_REDIS_ARGS);
    services = [];
    for (let i = 0; i <= WAITERS; i++) services.push(await clients.add(masters.urls));
    admin = new Redis(masters.urls[0]);
    admin.on('error', () => undefined); // the restart test stops its master for a moment
  });
  after(async () => {
    admin?.disconnect();
    await clients.closeAll();
    await masters?.stop();
  });

  it(`hands the lock from client to client about one round trip after each release, and a release wakes one of ${WAITERS} waiting clients, not all`, async (t) => {
    const key = newKey('wake');
    // Connected and warm, so that what is counted below is the hand-over alone.
    for (const service of services) await service.withLock(`${key}-warm-up`, async () => undefined);
    const holder = await services[0].acquire(key);
    const intervals: HoldInterval[] = [];
    const waiting = services.slice(1).map((service, i) =>
      service.withLock(key, async (lock) => {
        const start = process.hrtime.bigint();
        await sleep(HOLD_MS);
        intervals.push({ start, end: process.hrtime.bigint(), fencingToken: lock.fencingToken, holder: `client ${i + 1}` });
      }),
    );
    await sleep(100); // every waiter has voted once and joined the masters' waiters
    const before = await commandsExecuted((section) => admin.info(section));
    const releasedAt = process.hrtime.bigint();
    await holder.release();
    await Promise.all(waiting);
    const spent = await commandsExecuted((section) => admin.info(section));
    assertExclusive(intervals);
    intervals.sort((a, b) => Number(a.start - b.start));
    const gaps = [Number(intervals[0].start - releasedAt) / 1e6, ...intervals.slice(1).map((each, i) => Number(each.start - intervals[i].end) / 1e6)].sort((a, b) => a - b);
    const median = gaps[Math.floor(gaps.length / 2)];
    const scripts = (spent.byCommand.evalsha ?? 0) - (before.byCommand.evalsha ?? 0) + (spent.byCommand.eval ?? 0) - (before.byCommand.eval ?? 0);
    t.diagnostic(`release-to-grant gaps: median ${median.toFixed(1)} ms, max ${gaps.at(-1)!.toFixed(1)} ms (bound for the median: 25 ms)`);
    // Each hand-over: a release and the woken client's winning vote, and now and then a vote lost
    // to a split. Waking every waiter on every release would add about WAITERS * WAITERS / 2 losing votes.
    const bound = 3 * WAITERS;
    t.diagnostic(`scripts run on one master for ${WAITERS} hand-overs: ${scripts} (bound ${bound}; a herd would need over ${2 * WAITERS + (WAITERS * (WAITERS - 1)) / 2})`);
    assert.ok(median <= 25, `median hand-over ${median.toFixed(1)} ms`);
    assert.ok(scripts <= bound, `${scripts} scripts for ${WAITERS} hand-overs`);
  });

  it('still wakes waiters by word after every master restarted (the subscribers subscribed again)', async (t) => {
    await Promise.all(masters.masters.map((master) => master.server.restart()));
    const key = newKey('resubscribed');
    const [holderService, waiterService] = services;
    // Until both clients vote again, their connections are coming back.
    for (const started = performance.now(); ; await sleep(50)) {
      const lock = await holderService.tryAcquire(key).catch(() => null);
      if (lock) {
        await lock.release();
        break;
      }
      assert.ok(performance.now() - started < 10_000, 'the client did not reconnect within 10 s');
    }
    await waiterService.withLock(`${key}-warm-up`, async () => undefined, { waitTimeoutMs: 10_000 });
    await sleep(200); // the subscribers' own SUBSCRIBE follows their reconnection
    const holder = await holderService.acquire(key);
    let grantedAt = 0n;
    const waiting = waiterService.withLock(key, async () => void (grantedAt = process.hrtime.bigint()));
    await sleep(100);
    const releasedAt = process.hrtime.bigint();
    await holder.release();
    await waiting;
    const gapMs = Number(grantedAt - releasedAt) / 1e6;
    t.diagnostic(`release-to-grant after the restart: ${gapMs.toFixed(1)} ms (bound 100 ms; the safety net would take up to 1000 ms)`);
    assert.ok(gapMs <= 100);
  });
});
