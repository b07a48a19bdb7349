import assert from 'node:assert/strict';
import { subscribe, tracingChannel, unsubscribe } from 'node:diagnostics_channel';
import { describe, it } from 'node:test';
import { LOCK_CHANNELS, LockTimeoutError, MemoryLockBackend, MemoryLockStore, type AcquireMessage } from '../../lib';
import { lockServiceOver } from '../support/lock-service-factory';
import { overriddenBackend } from '../support/overridden-backend';
import { abortedWithin, sleep } from '../support/timing';

/** Every message of every channel, in order, while `run` runs. */
async function recorded(run: () => Promise<void>): Promise<Array<{ channel: string; message: Record<string, unknown> }>> {
  const seen: Array<{ channel: string; message: Record<string, unknown> }> = [];
  const plain = (['acquired', 'released', 'lost', 'timedOut', 'skipped'] as const).map((key) => {
    const listener = (message: unknown) => void seen.push({ channel: key, message: { ...(message as object) } });
    subscribe(LOCK_CHANNELS[key], listener);
    return [LOCK_CHANNELS[key], listener] as const;
  });
  const traced = tracingChannel<object, AcquireMessage>(LOCK_CHANNELS.acquire);
  const tracing = {
    start: (message: AcquireMessage) => void seen.push({ channel: 'acquire:start', message: { ...message } }),
    end: () => undefined,
    asyncStart: () => undefined,
    error: (message: AcquireMessage & { error?: unknown }) => void seen.push({ channel: 'acquire:error', message: { ...message } }),
    asyncEnd: (message: AcquireMessage) => void seen.push({ channel: 'acquire:asyncEnd', message: { ...message } }),
  };
  traced.subscribe(tracing);
  try {
    await run();
  } finally {
    traced.unsubscribe(tracing);
    for (const [name, listener] of plain) unsubscribe(name, listener);
  }
  return seen;
}

describe('diagnostics_channel: what the library publishes', () => {
  it('acquired, released, timed out, skipped and the acquire trace, with name, backend, token, wait and hold times', async () => {
    const store = new MemoryLockStore();
    const a = lockServiceOver(new MemoryLockBackend(store));
    const b = lockServiceOver(new MemoryLockBackend(store));
    let firstToken = 0n;
    let secondToken = 0n;
    const seen = await recorded(async () => {
      const first = await a.acquire('stock:1');
      firstToken = first.fencingToken;
      const waiting = b.acquire('stock:1');
      await sleep(40);
      await first.release();
      const second = await waiting;
      secondToken = second.fencingToken;
      await assert.rejects(a.acquire('stock:1', { waitTimeoutMs: 20 }), LockTimeoutError);
      assert.equal(await a.withLock('stock:1', () => 1, { onTimeout: 'skip', waitTimeoutMs: 0 }), undefined);
      assert.equal(await a.tryAcquire('stock:1'), null);
      await second.release();
      // Re-entered: no backend call, nothing published for the inner one.
      await b.withLock('reentered', () => b.withLock('reentered', () => undefined));
    });
    const of = (channel: string) => seen.filter((event) => event.channel === channel && event.message.name === 'stock:1').map((event) => event.message);
    const reentered = seen.filter((event) => event.message.name === 'reentered').map((event) => event.channel);
    assert.deepEqual(reentered, ['acquire:start', 'acquired', 'acquire:asyncEnd', 'released']);

    const acquired = of('acquired');
    // The dump leaves out asyncEnd's `result`, the handle: it reaches the backend, whose queues point back at it.
    assert.equal(acquired.length, 2, JSON.stringify(seen, (k, v) => (k === 'result' ? undefined : typeof v === 'bigint' ? `${v}n` : v)));
    assert.deepEqual(
      acquired.map(({ name, backend, mode, fencingToken }) => ({ name, backend, mode, fencingToken })),
      [
        { name: 'stock:1', backend: 'memory', mode: 'write', fencingToken: firstToken },
        { name: 'stock:1', backend: 'memory', mode: 'write', fencingToken: secondToken },
      ],
    );
    assert.ok((acquired[1].waitedMs as number) >= 35, `the waiter waited ${acquired[1].waitedMs} ms`);
    const released = of('released');
    assert.deepEqual(released.map(({ fencingToken, wasLost }) => ({ fencingToken, wasLost })), [
      { fencingToken: firstToken, wasLost: false },
      { fencingToken: secondToken, wasLost: false },
    ]);
    assert.ok((released[0].heldMs as number) >= 35, `held ${released[0].heldMs} ms`);
    assert.deepEqual(of('timedOut').map(({ name, backend }) => ({ name, backend })), [
      { name: 'stock:1', backend: 'memory' },
      { name: 'stock:1', backend: 'memory' },
    ]);
    assert.ok((of('timedOut')[0].waitedMs as number) >= 15);
    assert.equal(of('skipped').length, 1);
    // The trace: one start and one asyncEnd per backend acquisition (2 grants, a timeout, a skip, a try).
    assert.equal(of('acquire:start').length, 5);
    assert.equal(of('acquire:asyncEnd').length, 5);
    assert.deepEqual(of('acquire:asyncEnd').map((message) => message.fencingToken), [firstToken, secondToken, undefined, undefined, undefined]);
    assert.ok(of('acquire:asyncEnd').every((message) => typeof message.waitedMs === 'number'));
    // A try that finds the lock busy resolves (null): only the wait that timed out is an error.
    assert.deepEqual(of('acquire:error').map((message) => (message.error as Error).name), ['LockTimeoutError']);
    assert.deepEqual(of('acquire:start').map((message) => message.wait), [true, true, true, false, false]);
    await Promise.all([a.onApplicationShutdown(), b.onApplicationShutdown()]);
  });

  it('lost, with its reason, then released with wasLost', async () => {
    const service = lockServiceOver(overriddenBackend(() => ({ renew: async () => false })));
    const seen = await recorded(async () => {
      const lock = await service.acquire('refused', { ttlMs: 300 });
      await abortedWithin(lock.signal, 1_000);
      await lock.release();
    });
    const lost = seen.filter((event) => event.channel === 'lost').map((event) => event.message);
    assert.equal(lost.length, 1);
    assert.equal(lost[0].reason, 'renewal-refused');
    assert.equal(lost[0].name, 'refused');
    // The first renewal is due one interval (ttlMs / 3 = 100 ms) after the grant, rounded down to an
    // eighth of it so that renewals of many locks share a tick (nextRenewal): never before 87.5 ms.
    assert.ok((lost[0].heldMs as number) >= 87.5, `lost after ${lost[0].heldMs} ms, before the first renewal was due`);
    const released = seen.filter((event) => event.channel === 'released').map((event) => event.message);
    assert.deepEqual(released.map((message) => message.wasLost), [true]);
    await service.onApplicationShutdown();
  });
});
