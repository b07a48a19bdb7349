import assert from 'node:assert/strict';
import type { TestContext } from 'node:test';
import type { HolderProcess } from './holder-process';
import { assertExclusive, sleep, type HoldInterval } from './timing';

/** How long the waiters take to put their entries at the server before the crash. */
const QUEUE_SETTLE_MS = 300;

/** What one run of the restart scenario measured, in ms after the server was killed. */
export interface RestartRun {
  /** The old holder's lost signal; undefined when it kept its lock and released it. */
  readonly lostMs?: number;
  /** The first grant to a waiter. */
  readonly firstGrantMs: number;
  readonly oldToken: bigint;
  /** The waiters' tokens, in the order they were granted. */
  readonly newTokens: readonly bigint[];
}

const msSince = (from: bigint, to: bigint) => Number(to - from) / 1e6;

/**
 * One run of the restart scenario: `holder` (another process) holds `name`, `waiters` (other
 * processes) queue behind it, `crash` kills the server and starts it again; each waiter releases
 * as soon as it is granted. With `releaseHolderAfterMs` (a server that keeps its data), the old
 * holder releases that long after the crash unless it lost the lock by then. Hold intervals run from a grant to the holder's lost signal or its
 * release, on the one monotonic clock every process shares (hrtime): throws unless they are
 * disjoint and tokens rise in the order the holds began (assertExclusive).
 */
export async function restartRun(
  holder: HolderProcess,
  waiters: readonly HolderProcess[],
  name: string,
  crash: () => Promise<void>,
  waitTimeoutMs: number,
  releaseHolderAfterMs?: number,
): Promise<RestartRun> {
  const from = holder.events.length;
  const held = await holder.acquireTimed(name);
  const waits = waiters.map((waiter, index) => waiter.acquireTimed(name, { waitTimeoutMs }).then((grant) => ({ index, grant })));
  // Either may go unawaited when the run fails first: never an unhandled rejection.
  for (const wait of waits) wait.catch(() => undefined);
  await sleep(QUEUE_SETTLE_MS);
  const killedAt = process.hrtime.bigint();
  await crash();
  let holderReleasedAt: bigint | undefined;
  if (releaseHolderAfterMs !== undefined) {
    await sleep(releaseHolderAfterMs);
    if (holder.eventsOf('lost', from).length === 0) {
      holderReleasedAt = process.hrtime.bigint();
      await holder.release();
    }
  }
  const intervals: HoldInterval[] = [];
  const newTokens: bigint[] = [];
  let firstGrantMs = Infinity;
  for (let pending = new Map(waits.map((wait, index) => [index, wait])); pending.size > 0; ) {
    const { index, grant } = await Promise.race(pending.values());
    pending.delete(index);
    const releasedAt = process.hrtime.bigint();
    await waiters[index].release();
    firstGrantMs = Math.min(firstGrantMs, msSince(killedAt, grant.grantedAt));
    newTokens.push(grant.fencingToken);
    intervals.push({ start: grant.grantedAt, end: releasedAt, fencingToken: grant.fencingToken, holder: `waiter ${index}` });
  }
  const lostAt = holderReleasedAt === undefined ? BigInt((await holder.next('lost', waitTimeoutMs, from)).at) : undefined;
  intervals.push({ start: held.grantedAt, end: lostAt ?? holderReleasedAt!, fencingToken: held.fencingToken, holder: 'the holder before the crash' });
  assertExclusive(intervals);
  return { lostMs: lostAt === undefined ? undefined : msSince(killedAt, lostAt), firstGrantMs, oldToken: held.fencingToken, newTokens };
}

/** One diagnostic line per run, and the ranges over all runs. */
export function reportRuns(t: TestContext, runs: readonly RestartRun[], boundText: string): void {
  for (const [i, run] of runs.entries()) {
    t.diagnostic(
      `run ${i + 1}: old holder ${run.lostMs === undefined ? 'kept its lock and released it' : `lost at ${run.lostMs.toFixed(0)} ms after the kill`}, first waiter granted at ${run.firstGrantMs.toFixed(0)} ms ` +
        `(${boundText}); token ${run.oldToken} before, ${run.newTokens.join(', ')} after`,
    );
  }
  const range = (values: number[]) => `${Math.min(...values).toFixed(0)}-${Math.max(...values).toFixed(0)} ms`;
  const lost = runs.flatMap((run) => (run.lostMs === undefined ? [] : [run.lostMs]));
  t.diagnostic(`${runs.length} runs: lost signal ${lost.length > 0 ? range(lost) : 'never'}, first grant ${range(runs.map((run) => run.firstGrantMs))} after the kill`);
}

/**
 * What restart protection promises in every run: nothing granted within a ttl of the kill (the
 * quarantine starts once the server is back), the old holder told of its loss before any grant,
 * and no fence going back.
 */
export function assertProtectedRuns(runs: readonly RestartRun[], ttlMs: number): void {
  for (const run of runs) {
    assert.ok(run.firstGrantMs >= ttlMs, `a waiter was granted ${run.firstGrantMs.toFixed(0)} ms after the kill, within the ttl`);
    assert.ok(run.lostMs !== undefined && run.lostMs <= run.firstGrantMs, 'the old holder learned of its loss after a waiter was granted');
    assert.ok(run.newTokens.every((token) => token > run.oldToken), `a fence went back: ${run.oldToken} before, ${run.newTokens.join(', ')} after`);
  }
}
