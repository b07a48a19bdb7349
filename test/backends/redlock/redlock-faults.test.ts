import assert from 'node:assert/strict';
import { Redis } from 'ioredis';
import { after, afterEach, describe, it } from 'node:test';
import { LockBackendError, LockLostError, LockServerUnreachableError } from '../../../lib';
import { RedisMasters } from '../../../servers/redis-masters';
import { RedisStockStore } from '../../../sample-app/inventory/redis-stock.store';
import { HolderProcess } from '../../support/holder-process';
import { FAULT_SUITE_TIMEOUT_MS, sleep } from '../../support/timing';
import { RedlockClients, newKey } from './redlock-test-kit';

const SERVER_TIMEOUT_MS = 1_000;
const WAIT_TIMEOUT_MS = 2_000;
/** Timers, process start-up and reconnects on a loaded 2-core machine. */
const MARGIN_MS = 1_000;
const REQUEST_TIMEOUT_MS = 200;

/** Faults of a minority and of a majority of 3 and 5 real masters; every bound printed next to its measurement. */
describe('redlock faults', { timeout: FAULT_SUITE_TIMEOUT_MS }, () => {
  const clients = new RedlockClients();
  const running: RedisMasters[] = [];
  const holders: HolderProcess[] = [];
  const start = async (count: number) => {
    const masters = await RedisMasters.start(count);
    running.push(masters);
    return masters;
  };
  afterEach(async () => {
    await Promise.all(holders.splice(0).map((holder) => holder.stop()));
    await clients.closeAll();
    await Promise.all(running.map((masters) => masters.restore()));
  });
  after(async () => {
    await Promise.all(running.map((masters) => masters.stop()));
  });

  for (const count of [3, 5]) {
    const minority = Math.floor((count - 1) / 2);

    it(`${count} masters, ${minority} paused (SIGSTOP): locks are still exclusive and no call waits for the paused ones`, async (t) => {
      const masters = await start(count);
      const [a, b] = [await clients.add(masters.urls, { serverTimeoutMs: SERVER_TIMEOUT_MS }), await clients.add(masters.urls, { serverTimeoutMs: SERVER_TIMEOUT_MS })];
      const key = newKey('paused');
      await a.withLock(key, async () => undefined);
      for (const master of masters.masters.slice(0, minority)) master.server.pause();
      let inside = 0;
      let slowest = 0;
      await Promise.all(
        [a, b].flatMap((service) =>
          Array.from({ length: 10 }, async () => {
            const started = performance.now();
            await service.withLock(key, async () => {
              assert.equal(++inside, 1, 'two holders at once');
              await sleep(2);
              inside--;
            });
            slowest = Math.max(slowest, performance.now() - started);
          }),
        ),
      );
      const single = performance.now();
      await (await a.acquire(newKey('paused-single'))).release();
      const cycleMs = performance.now() - single;
      t.diagnostic(`one acquire + release with ${minority} of ${count} paused: ${Math.round(cycleMs)} ms (bound ${REQUEST_TIMEOUT_MS} ms, the request timeout); slowest of 20 contended callers ${Math.round(slowest)} ms`);
      assert.ok(cycleMs < REQUEST_TIMEOUT_MS, `an uncontended cycle took ${Math.round(cycleMs)} ms: it waited for a paused master`);
    });

    it(`${count} masters, a majority killed: every call fails by its bound with a LockBackendError naming the masters that did not answer`, async (t) => {
      const masters = await start(count);
      const service = await clients.add(masters.urls, { serverTimeoutMs: SERVER_TIMEOUT_MS });
      const held = await service.acquire(newKey('majority'), { ttlMs: 1_500 });
      const down = masters.masters.slice(0, Math.floor(count / 2) + 1);
      const killedAt = performance.now();
      await Promise.all(down.map((master) => master.server.stop('SIGKILL')));
      const downAddresses = down.map((master) => `127.0.0.1:${master.port}`);
      const outcomes = await Promise.all([
        measure(() => service.acquire(newKey('majority'), { waitTimeoutMs: WAIT_TIMEOUT_MS })),
        measure(() => service.tryAcquire(newKey('majority'))),
      ]);
      for (const [what, outcome] of [['acquire', outcomes[0]], ['tryAcquire', outcomes[1]]] as const) {
        t.diagnostic(`${what}: ${Math.round(outcome.ms)} ms (bound ${WAIT_TIMEOUT_MS + MARGIN_MS} ms): ${(outcome.error as Error)?.message}`);
        assert.ok(outcome.ms <= WAIT_TIMEOUT_MS + MARGIN_MS);
        assert.ok(outcome.error instanceof LockBackendError, `${what}: ${String(outcome.error)}`);
        for (const address of downAddresses) assert.ok((outcome.error as Error).message.includes(address), `${what} does not name ${address}`);
      }
      await new Promise((resolve) => held.signal.addEventListener('abort', resolve, { once: true }));
      t.diagnostic(`the held lock's signal fired ${Math.round(performance.now() - killedAt)} ms after the kill (bound: its ttl, 1500 ms + ${MARGIN_MS} ms)`);
      assert.ok(performance.now() - killedAt <= 1_500 + MARGIN_MS);
      assert.ok(held.signal.reason instanceof LockLostError && held.signal.reason.reason === 'server-unreachable', String(held.signal.reason));
      assert.ok(held.signal.reason.cause instanceof LockServerUnreachableError);
      await held.release();
    });

    it(`${count} masters: a holder SIGKILLed blocks a waiter for at most its ttl + 300 ms`, async (t) => {
      const masters = await start(count);
      const ttlMs = 1_500;
      const holder = await HolderProcess.start('redlock', { urls: masters.urls.join(',') }, ttlMs);
      holders.push(holder);
      const key = newKey('crash');
      const token = await holder.acquire(key);
      const waiter = await clients.add(masters.urls, { ttlMs });
      const waiting = waiter.acquire(key, { waitTimeoutMs: 10_000 });
      await sleep(ttlMs / 2);
      const killedAt = performance.now();
      holder.kill('SIGKILL');
      const lock = await waiting;
      const ms = performance.now() - killedAt;
      t.diagnostic(`granted ${Math.round(ms)} ms after the kill (bound ${ttlMs + 300} ms), token ${lock.fencingToken} after ${token}`);
      assert.ok(ms <= ttlMs + 300);
      assert.ok(lock.fencingToken > token);
      await lock.release();
    });
  }

  it('a holder paused past its validity: its signal fires on resume and its fenced write is refused', async (t) => {
    const masters = await start(3);
    const ttlMs = 1_000;
    const holder = await HolderProcess.start('redlock', { urls: masters.urls.join(',') }, ttlMs);
    holders.push(holder);
    const sku = newKey('sku');
    const redis = new Redis(masters.urls[0]);
    const store = new RedisStockStore(redis);
    await store.seed(sku, 10);
    const staleToken = await holder.acquire(`stock:${sku}`);
    holder.kill('SIGSTOP');
    const service = await clients.add(masters.urls, { ttlMs });
    const lock = await service.acquire(`stock:${sku}`, { waitTimeoutMs: 5_000 });
    await store.write(sku, { stock: 9, lucky: 1, winner: 'fresh holder' }, lock.fencingToken);
    const resumedAt = performance.now();
    holder.kill('SIGCONT');
    const lost = await holder.lost(5_000);
    t.diagnostic(`the paused holder's signal fired ${Math.round(performance.now() - resumedAt)} ms after SIGCONT (bound 500 ms): ${lost.message}`);
    assert.ok(performance.now() - resumedAt < 500);
    const refused = await holder.write(sku, { stock: 8, lucky: 2 });
    t.diagnostic(`the stale holder (token ${staleToken}) wrote after token ${lock.fencingToken}: ${refused ?? 'accepted'}`);
    assert.equal(refused, 'StaleFencingTokenError');
    assert.deepEqual(await store.read(sku), { stock: 9, lucky: 1 });
    await lock.release();
    redis.disconnect();
  });
});

async function measure<T>(call: () => Promise<T>): Promise<{ ms: number; error?: unknown }> {
  const started = performance.now();
  try {
    await call();
    return { ms: performance.now() - started };
  } catch (error) {
    return { ms: performance.now() - started, error };
  }
}
