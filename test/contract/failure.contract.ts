import { after, before, describe } from 'node:test';
import { burstCases } from './failure/burst.contract';
import { crashFailoverCases } from './failure/crash-failover.contract';
import type { FailureContext, FailureContractOptions, FailureTarget } from './failure/failure-target';
import { lateGrantCases } from './failure/late-grant.contract';
import { lockDelayCases } from './failure/lock-delay.contract';
import { serverFaultCases } from './failure/server-faults.contract';
import { shutdownCases } from './failure/shutdown.contract';
import { startupCases } from './failure/startup.contract';

export type { FailureContractOptions, FailureTarget, Route } from './failure/failure-target';

/**
 * The whole suite's bound, below the runner's 120 s per file (scripts/test.js): every case bounds
 * its own waits, so a backend that hangs fails case by case and the suite still stops its servers.
 */
const FAILURE_SUITE_TIMEOUT_MS = 100_000;

/**
 * The failure contract of issue 9 (README, "When things go wrong"), one case per point, run
 * against every backend with real servers: server killed, paused (SIGSTOP) and black-holed
 * (points 1, 2), startup with the server down (3), a holder process SIGKILLed (4), bursts (5), a
 * late grant (7) and shutdown (8). Point 6 needs no server: test/unit/options.test.ts. Every
 * timing case prints its measurement next to its bound.
 */
export function runFailureContract(options: FailureContractOptions): void {
  describe(`failure contract: ${options.name}`, { timeout: FAILURE_SUITE_TIMEOUT_MS }, () => {
    let target: FailureTarget | undefined;
    let keySeq = 0;
    const context: FailureContext = {
      options,
      target() {
        if (!target) throw new Error('the target did not start');
        return target;
      },
      newKey: () => `failure-${process.pid}-${Date.now().toString(36)}-${++keySeq}`,
    };

    before(async () => {
      target = await options.start();
    });
    after(async () => {
      await target?.stop();
    });

    const server = options.serverless ? `${options.name} has no server to fail` : false;
    const processes = options.serverless ? `${options.name} is not shared between processes` : false;
    describe('1, 2: every call ends by its deadline and says the server is unreachable', { skip: server }, () => serverFaultCases(context));
    describe('3: startup is the same on every backend', { skip: server }, () => startupCases(context));
    describe('4: ttlMs bounds crash failover', { skip: processes }, () => crashFailoverCases(context));
    describe('5: bursts are absorbed, not failed', () => burstCases(context));
    // Not a FIFO case: without FIFO (Redlock) the paused waiter is simply not the one granted,
    // and what is checked still holds: no overlap, and the next waiter is not kept waiting for it.
    describe('7: a late grant is never a fresh lease', { skip: processes }, () => lateGrantCases(context));
    describe('8: shutdown is quiet and exact', { skip: processes }, () => shutdownCases(context));
    // In process (memory), the holder's lease runs out unreleased instead of its process dying.
    describe('lock-delay: a lease that ends unreleased holds its name', { skip: options.lockDelay === false ? `${options.name} refuses lockDelayMs` : false }, () => lockDelayCases(context));
  });
}
