import assert from 'node:assert/strict';
import { afterEach, describe, it } from 'node:test';
import type { LockService } from '../../../lib';
import { createRedisBackend } from '../../../lib/backends/redis/redis.backend';
import { RedisSentinelGroup } from '../../../servers/redis-sentinel';
import { lockServiceOver } from '../../support/lock-service-factory';
import { FAULT_SUITE_TIMEOUT_MS, sleep } from '../../support/timing';

/** The module's ttlMs: the quarantine a promoted replica gets. */
const TTL_MS = 3_000;
/** Timer lateness and a few round trips on a loaded 2-core machine. */
const BOUND_MS = 1_000;
/** Tries of a fresh name this often while the switchover goes on. */
const TRY_EVERY_MS = 50;

/**
 * `SENTINEL FAILOVER` while a lock is held: the old primary stays up, and takes writes until the
 * sentinel demotes it, about ten seconds later (measured), so a process that stays connected to
 * it grants locks the new primary never gets. The backend moves its connections as soon as the
 * sentinel announces the new primary (ioredis' failoverDetector), then closes it to grants for
 * a ttl, as after any failover (it may lack the old primary's last writes).
 */
describe('Redis backend behind Sentinel, a switchover (SENTINEL FAILOVER, the old primary left up)', { timeout: FAULT_SUITE_TIMEOUT_MS }, () => {
  let group: RedisSentinelGroup | undefined;
  let service: LockService | undefined;
  afterEach(async () => {
    await service?.onApplicationShutdown();
    await group?.stop();
    service = group = undefined;
  });

  it('moves to the new primary at once, grants nothing there for a ttl, and keeps the lock it holds', async (t) => {
    group = await RedisSentinelGroup.start();
    service = lockServiceOver(await createRedisBackend({ type: 'redis', options: group.connection }, { ttlMs: TTL_MS, serverTimeoutMs: 5_000 }), { ttlMs: TTL_MS });
    const kept = await service.acquire('kept');
    await group.untilReplicaCaughtUp(5_000);
    const startedAt = performance.now();
    await group.switchover();
    await group.untilPrimaryIs(group.replica.port, 20_000);
    const promotedMs = performance.now() - startedAt;

    // Fresh names: granted at once while the process still talks to the old primary, refused
    // once it is on the new one and has closed it, granted again when the quarantine ends.
    let firstRefusedMs: number | undefined;
    let grantedMs: number | undefined;
    let grantedName = '';
    for (let i = 0; grantedMs === undefined && performance.now() - startedAt < promotedMs + TTL_MS + 3 * BOUND_MS; i++) {
      const name = `fresh-${i}`;
      const handle = await service.tryAcquire(name);
      const atMs = performance.now() - startedAt;
      if (!handle) firstRefusedMs ??= atMs;
      else if (firstRefusedMs !== undefined) [grantedMs, grantedName] = [atMs, name];
      else await handle.release();
      await sleep(TRY_EVERY_MS);
    }
    const seen = grantedName ? await service.inspect(grantedName) : undefined;
    t.diagnostic(
      `ttl ${TTL_MS} ms; the sentinel named the new primary ${promotedMs.toFixed(0)} ms after SENTINEL FAILOVER; the first try refused at ` +
        `${firstRefusedMs?.toFixed(0)} ms (bound: that + ${BOUND_MS} ms), the first grant after it at ${grantedMs?.toFixed(0)} ms ` +
        `(bounds: the refusal + the ttl - ${BOUND_MS} ms, the naming + the ttl + ${2 * BOUND_MS} ms); the held lock lost: ${kept.signal.aborted}`,
    );
    assert.ok(firstRefusedMs !== undefined && firstRefusedMs <= promotedMs + BOUND_MS, `the first refused try came ${firstRefusedMs} ms after SENTINEL FAILOVER`);
    assert.ok(grantedMs !== undefined, 'nothing was granted after the quarantine');
    assert.ok(grantedMs >= firstRefusedMs + TTL_MS - BOUND_MS, `granted ${grantedMs - firstRefusedMs} ms after the first refusal`);
    assert.ok(grantedMs <= promotedMs + TTL_MS + 2 * BOUND_MS, `granted ${grantedMs} ms after SENTINEL FAILOVER`);
    // The grant is the new primary's: the backend's connection is on it now.
    assert.ok(seen?.holder !== undefined, `"${grantedName}" has no holder on the new primary`);
    assert.equal(kept.signal.aborted, false, 'the lock held across the switchover was lost');
    await kept.release();
  });
});
