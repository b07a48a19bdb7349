import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { LockServerUnreachableError, type LockService } from '../../../lib';
import { startRedisServer, type RedisServer } from '../../../servers/redis-server';
import { moduleLikeService } from '../../support/lock-service-factory';
import { sleep } from '../../support/timing';

/** serverTimeoutMs of the service: what each call would cost if a refusal were waited out. */
const SERVER_TIMEOUT_MS = 5_000;
/** A refused call fails without waiting for the server: a few ms of work, on a loaded machine. */
const REFUSED_BOUND_MS = 100;
/** Back within the next reconnection attempt (at most about 1.1 s apart) and one round trip. */
const RECOVERY_BOUND_MS = 2_000;

/** Time `call` takes to settle, and how it settled. */
async function timed<T>(call: () => Promise<T>): Promise<{ ms: number; value?: T; error?: unknown }> {
  const started = performance.now();
  try {
    const value = await call();
    return { ms: performance.now() - started, value };
  } catch (error) {
    return { ms: performance.now() - started, error };
  }
}

describe('redis backend when the server refuses connections', () => {
  let redis: RedisServer;
  let service: LockService;

  before(async () => {
    redis = await startRedisServer();
    await redis.server.stop('SIGKILL');
    ({ service } = await moduleLikeService({ backend: { type: 'redis', url: redis.url }, serverTimeoutMs: SERVER_TIMEOUT_MS, waitTimeoutMs: 10_000 }));
    // The first connection attempt has been refused.
    await sleep(300);
  });

  after(async () => {
    await service.onApplicationShutdown();
    await redis.stop();
  });

  it('every call fails at once with LockServerUnreachableError, its cause the refusal', async (t) => {
    const calls = {
      acquire: () => service.acquire('refused-1'),
      tryAcquire: () => service.tryAcquire('refused-1'),
      withLock: () => service.withLock('refused-1', async () => 'ran'),
      readLock: () => service.acquire('refused-1', { mode: 'read' }),
      semaphore: () => service.acquireSemaphore('refused-1', 3),
    };
    for (const [what, call] of Object.entries(calls)) {
      const outcome = await timed<unknown>(call);
      t.diagnostic(`${what}: ${Math.round(outcome.ms)} ms (bound ${REFUSED_BOUND_MS} ms, serverTimeoutMs ${SERVER_TIMEOUT_MS} ms)`);
      assert.ok(outcome.error instanceof LockServerUnreachableError, `${what}: ${String(outcome.error ?? outcome.value)}`);
      assert.match(String((outcome.error as Error).cause), /ECONNREFUSED/, `${what}: the cause is not the refusal`);
      assert.ok(outcome.ms < REFUSED_BOUND_MS, `${what} took ${Math.round(outcome.ms)} ms`);
    }
  });

  it('once the server is back, a call succeeds within the next reconnection attempt', async (t) => {
    const startedAt = performance.now();
    await redis.server.restart();
    const backAt = performance.now();
    t.diagnostic(`redis-server restarted in ${Math.round(backAt - startedAt)} ms`);
    let lock = null;
    while (!lock && performance.now() - backAt < RECOVERY_BOUND_MS) {
      lock = await service.tryAcquire('refused-2').catch(() => null);
      if (!lock) await sleep(20);
    }
    const recoveredMs = performance.now() - backAt;
    t.diagnostic(`a tryAcquire succeeded ${Math.round(recoveredMs)} ms after the server was back (bound ${RECOVERY_BOUND_MS} ms)`);
    assert.ok(lock, `no call succeeded within ${RECOVERY_BOUND_MS} ms of the server coming back`);
    await lock.release();
    const waited = await service.withLock('refused-2', async (handle) => handle.fencingToken);
    assert.ok(waited > 0n);
  });
});
