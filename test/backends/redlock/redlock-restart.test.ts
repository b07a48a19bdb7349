import 'reflect-metadata';
import { after, afterEach, before, describe, it } from 'node:test';
import { RedisMasters } from '../../../servers/redis-masters';
import { HolderProcess } from '../../support/holder-process';
import { assertProtectedRuns, reportRuns, restartRun, type RestartRun } from '../../support/restart-scenario';

/** The holders' lease (the module's ttlMs): the quarantine a master restarted without data gets. */
const TTL_MS = 1_000;
const RUNS = 20;
const WAIT_TIMEOUT_MS = 15_000;

/**
 * Redlock masters SIGKILLed while a lock is held and two waiters of other processes queue, started
 * again without persistence (the test servers' default): they forgot their votes.
 */
describe('Redlock masters restarted without their data', { timeout: 230_000 }, () => {
  let masters: RedisMasters;
  const holders: HolderProcess[] = [];
  const server = (index: number) => masters.masters[index].server;

  before(async () => (masters = await RedisMasters.start(3)));
  after(() => masters.stop());
  afterEach(async () => {
    await Promise.all(holders.splice(0).map((holder) => holder.stop()));
    await masters.restore();
  });

  const startHolders = async () => {
    // Each has voted on every master once (its warm-up) before the runs: it knows their lives.
    const started = await Promise.all([0, 1, 2].map(() => HolderProcess.withModule({ backend: { type: 'redlock', urls: masters.urls }, ttlMs: TTL_MS })));
    holders.push(...started);
    return started;
  };

  it(`a lock held on a bare majority, one of its masters restarted empty: the restarted masters make no new majority for a ttl (${RUNS} runs)`, async (t) => {
    const [holder, ...waiters] = await startHolders();
    const runs: RestartRun[] = [];
    for (let run = 0; run < RUNS; run++) {
      // Master 2 is down as the lock is taken: the holder's majority is masters 0 and 1.
      await server(2).stop('SIGKILL');
      const crash = async () => {
        // Master 0 forgets the holder's vote; 0 and 2, both empty, would be a majority for a waiter.
        await server(0).stop('SIGKILL');
        await Promise.all([server(0).restart(), server(2).restart()]);
      };
      runs.push(await restartRun(holder, waiters, `restart-one-${run}`, crash, WAIT_TIMEOUT_MS));
    }
    reportRuns(t, runs, `quarantine >= ttl ${TTL_MS} ms`);
    assertProtectedRuns(runs, TTL_MS);
  });

  it(`every master restarted empty: no grant before the old holder knew of its loss, the fence never goes back (${RUNS} runs)`, async (t) => {
    const [holder, ...waiters] = await startHolders();
    const crash = async () => {
      await Promise.all([0, 1, 2].map((index) => server(index).stop('SIGKILL')));
      await Promise.all([0, 1, 2].map((index) => server(index).restart()));
    };
    const runs: RestartRun[] = [];
    for (let run = 0; run < RUNS; run++) runs.push(await restartRun(holder, waiters, `restart-all-${run}`, crash, WAIT_TIMEOUT_MS));
    reportRuns(t, runs, `quarantine >= ttl ${TTL_MS} ms`);
    assertProtectedRuns(runs, TTL_MS);
  });
});
