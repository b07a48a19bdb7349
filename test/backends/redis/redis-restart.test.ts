import 'reflect-metadata';
import assert from 'node:assert/strict';
import { after, afterEach, before, describe, it } from 'node:test';
import { startRedisServer, type RedisServer } from '../../../servers/redis-server';
import { HolderProcess } from '../../support/holder-process';
import { assertProtectedRuns, reportRuns, restartRun, type RestartRun } from '../../support/restart-scenario';

/** The holders' lease (the module's ttlMs): the quarantine a restart without data gets. */
const TTL_MS = 1_000;
const RUNS = 20;
const WAIT_TIMEOUT_MS = 15_000;

/**
 * redis-server SIGKILLed while a lock is held and two waiters of other processes queue, started
 * again on its port without persistence (the test server's default): it forgot every lock.
 */
describe('redis-server restarted without its data', { timeout: 115_000 }, () => {
  let redis: RedisServer;
  const holders: HolderProcess[] = [];
  const crash = async () => {
    await redis.server.stop('SIGKILL');
    await redis.server.restart();
  };
  const startHolders = async (backend: Record<string, unknown>) => {
    const started = await Promise.all([0, 1, 2].map(() => HolderProcess.withModule({ backend: { type: 'redis', url: redis.url, ...backend } as never, ttlMs: TTL_MS })));
    holders.push(...started);
    return started;
  };

  before(async () => (redis = await startRedisServer()));
  after(() => redis.stop());
  afterEach(async () => {
    await Promise.all(holders.splice(0).map((holder) => holder.stop()));
  });

  it(`grants nothing until the old holder knew of its loss, and the fence never goes back (${RUNS} runs)`, async (t) => {
    const [holder, ...waiters] = await startHolders({});
    const runs: RestartRun[] = [];
    for (let run = 0; run < RUNS; run++) runs.push(await restartRun(holder, waiters, `restart-${run}`, crash, WAIT_TIMEOUT_MS));
    reportRuns(t, runs, `quarantine >= ttl ${TTL_MS} ms`);
    assertProtectedRuns(runs, TTL_MS);
  });

  it('restartProtection: false grants at once after such a restart; the fence still never goes back', async (t) => {
    const [holder, ...waiters] = await startHolders({ restartProtection: false });
    const name = 'restart-unprotected';
    const from = holder.events.length;
    const held = await holder.acquireTimed(name);
    const waited = waiters[0].acquireTimed(name, { waitTimeoutMs: WAIT_TIMEOUT_MS });
    await new Promise((resolve) => setTimeout(resolve, 300));
    const killedAt = process.hrtime.bigint();
    await crash();
    const granted = await waited;
    const lost = await holder.next('lost', WAIT_TIMEOUT_MS, from);
    const grantMs = Number(granted.grantedAt - killedAt) / 1e6;
    const lostMs = Number(BigInt(lost.at) - killedAt) / 1e6;
    t.diagnostic(`granted ${grantMs.toFixed(0)} ms after the kill, old holder lost at ${lostMs.toFixed(0)} ms (two live holders for ${Math.max(0, lostMs - grantMs).toFixed(0)} ms); token ${held.fencingToken} before, ${granted.fencingToken} after`);
    assert.ok(grantMs < TTL_MS, `without the protection the waiter was granted only ${grantMs.toFixed(0)} ms after the kill`);
    assert.ok(granted.fencingToken > held.fencingToken, `the fence went back: ${held.fencingToken}, then ${granted.fencingToken}`);
  });
});
