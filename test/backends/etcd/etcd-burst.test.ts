import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { DEFAULT_WAIT_TIMEOUT_MS } from '../../../lib/lock-defaults';
import { exclusiveBurst } from '../../support/exclusive-burst';
import { lockServiceOver } from '../../support/lock-service-factory';
import { FAULT_SUITE_TIMEOUT_MS, sleep } from '../../support/timing';
import { etcdFixture } from './etcd-test-kit';

/**
 * Contract point 5 on etcd: a burst of callers in one process is absorbed, with the module's
 * default waitTimeoutMs (10 s). Server writes are counted as etcd counts them: every write
 * transaction raises the store's revision by one, reads and keepalives do not.
 */
describe('etcd backend: bursts of 1000 callers in one process', { timeout: FAULT_SUITE_TIMEOUT_MS }, () => {
  const etcd = etcdFixture();
  let seq = 0;
  const newKey = () => `etcd-burst-${process.pid}-${++seq}`;
  const revision = async () => BigInt((await etcd.admin.kv.range({ key: Buffer.from('revision-probe') })).header.revision);

  /** The services' backends, already holding a session (as a running app's would). */
  async function services(count: number) {
    const created = Array.from({ length: count }, () => lockServiceOver(etcd.backend()));
    for (const service of created) await (await service.acquire(newKey())).release();
    return created;
  }

  it('1000 callers of one key: no error within the default waitTimeoutMs, one holder at a time, one put and one delete', async () => {
    const clients = await services(1);
    const key = newKey();
    const before = await revision();
    const elapsedMs = await exclusiveBurst(Array.from({ length: 1000 }, () => key), clients);
    const writes = (await revision()) - before;
    console.log(`burst of 1000 on one key in one process: ${elapsedMs} ms (bound ${DEFAULT_WAIT_TIMEOUT_MS} ms), ${writes} server writes`);
    assert.ok(elapsedMs < DEFAULT_WAIT_TIMEOUT_MS, `the burst took ${elapsedMs} ms`);
    assert.equal(writes, 2n, 'a burst that arrives at once shares one key: one put, one delete');
  });

  it('1000 callers of 1000 distinct keys: no error within the default waitTimeoutMs, one put and one delete per key', async () => {
    const clients = await services(1);
    const before = await revision();
    const elapsedMs = await exclusiveBurst(Array.from({ length: 1000 }, () => newKey()), clients);
    const writes = (await revision()) - before;
    console.log(`burst of 1000 on distinct keys in one process: ${elapsedMs} ms (bound ${DEFAULT_WAIT_TIMEOUT_MS} ms), ${writes} server writes`);
    assert.ok(elapsedMs < DEFAULT_WAIT_TIMEOUT_MS, `the burst took ${elapsedMs} ms`);
    assert.equal(writes, 2000n);
  });

  it('two processes with 500 callers each on one key: one holder at a time, tokens increasing in the order the holds began', async () => {
    const clients = await services(2);
    const key = newKey();
    const before = await revision();
    const elapsedMs = await exclusiveBurst(Array.from({ length: 1000 }, () => key), clients);
    const writes = (await revision()) - before;
    console.log(`burst of 2 x 500 on one key in two processes: ${elapsedMs} ms, ${writes} server writes`);
    assert.equal(writes, 4n, 'each process: one put, one delete');
  });

  it('tokens stay increasing when a process serves a later caller under its key while another process waits', async () => {
    const [a, b] = await services(2);
    const key = newKey();
    const tokens: Array<[string, bigint]> = [];
    const take = (service: typeof a, who: string, holdMs = 0) =>
      service.withLock(key, async (lock) => {
        tokens.push([who, lock.fencingToken]);
        await sleep(holdMs);
      });
    // a's first two callers share a key, the first holding while b queues behind that key and
    // a's third caller arrives after b: a hand-over inside a may never give a token below b's.
    const first = [take(a, 'a1', 200), take(a, 'a2')];
    await sleep(50);
    const second = take(b, 'b1');
    await sleep(50);
    const third = take(a, 'a3');
    await Promise.all([...first, second, third]);
    assert.deepEqual(
      tokens.map(([who]) => who),
      ['a1', 'a2', 'b1', 'a3'],
    );
    for (let i = 1; i < tokens.length; i++) assert.ok(tokens[i][1] > tokens[i - 1][1], `tokens ${tokens.map(([w, t]) => `${w}=${t}`).join(', ')}`);
  });
});
