import 'reflect-metadata';
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import type { BackendOptions } from '../../lib';
import { EtcdCluster } from '../../servers/etcd-server';
import { startPostgresServer, type PostgresServer } from '../../servers/postgres-server';
import { HolderProcess } from '../support/holder-process';
import { reportRuns, restartRun, type RestartRun } from '../support/restart-scenario';

/** Long enough for the holder's lease to outlast the server's restart: these servers keep it. */
const TTL_MS = 5_000;
/** The holder releases this long after the crash, its lock kept through the restart. */
const RELEASE_AFTER_MS = 1_000;
const RUNS = 3;
const WAIT_TIMEOUT_MS = 30_000;

/**
 * The Redis restart scenario (a holder, two waiters in other processes, the server SIGKILLed and
 * started again) on servers that keep their data: nothing to add there, and this shows it.
 */
async function runScenario(backend: BackendOptions, crash: () => Promise<void>): Promise<RestartRun[]> {
  const [holder, ...waiters] = await Promise.all([0, 1, 2].map(() => HolderProcess.withModule({ backend, ttlMs: TTL_MS })));
  try {
    const runs: RestartRun[] = [];
    for (let run = 0; run < RUNS; run++) runs.push(await restartRun(holder, waiters, `durable-${run}`, crash, WAIT_TIMEOUT_MS, RELEASE_AFTER_MS));
    return runs;
  } finally {
    await Promise.all([holder, ...waiters].map((process) => process.stop()));
  }
}

const assertKept = (runs: readonly RestartRun[]) => {
  for (const run of runs) assert.equal(run.lostMs, undefined, 'the holder lost a lock its server kept through the restart');
  for (const run of runs) assert.ok(run.newTokens.every((token) => token > run.oldToken), `a fence went back: ${run.oldToken} before, ${run.newTokens.join(', ')} after`);
};

describe('PostgreSQL SIGKILLed and restarted with its data while a lock is held', { timeout: 110_000 }, () => {
  let postgres: PostgresServer;
  // The test server's synchronous_commit=off may lose the last commits to a crash; a lock needs on.
  before(async () => (postgres = await startPostgresServer(['-c', 'synchronous_commit=on'])));
  after(() => postgres.stop());

  it(`no overlap of live holds, the fence never goes back (${RUNS} runs)`, async (t) => {
    const runs = await runScenario({ type: 'postgres', url: postgres.url }, async () => {
      await postgres.server.stop('SIGKILL');
      await postgres.server.restart();
    });
    reportRuns(t, runs, `holder released ${RELEASE_AFTER_MS} ms after the crash`);
    assertKept(runs);
  });
});

describe('etcd SIGKILLed and restarted with its data while a lock is held', { timeout: 110_000 }, () => {
  let etcd: EtcdCluster;
  before(async () => (etcd = await EtcdCluster.start(1)));
  after(() => etcd.stop());

  it(`no overlap of live holds, the fence never goes back (${RUNS} runs)`, async (t) => {
    const runs = await runScenario({ type: 'etcd', hosts: etcd.hosts }, async () => {
      await etcd.kill(0);
      await etcd.revive(0);
    });
    reportRuns(t, runs, `holder released ${RELEASE_AFTER_MS} ms after the crash`);
    assertKept(runs);
  });
});
