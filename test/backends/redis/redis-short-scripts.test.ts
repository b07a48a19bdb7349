import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { Redis } from 'ioredis';
import { LockTimeoutError } from '../../../lib';
import { createBackend } from '../../../lib/backends/registry';
import { lockKeys } from '../../../lib/backends/redis/redis-keys';
import { acquireScript, acquireShortScript, GRANT_CHANNEL_PREFIX, releaseScript, releaseShortScript } from '../../../lib/backends/redis/redis-lock-scripts';
import { beginLifeScript, LIFE_KEY } from '../../../lib/backends/redis/server-life-scripts';
import { startRedisServer, type RedisServer } from '../../../servers/redis-server';
import { lockServiceOver } from '../../support/lock-service-factory';
import { eventually, sleep } from '../../support/timing';

/**
 * The short scripts an uncontended cycle sends (acquireShortScript, releaseShortScript) do the
 * common case whole, and in every other case either reply as the whole script would or change
 * nothing and say so, so that the whole script, sent next, finds the lock as it was.
 */
describe('redis backend: the short acquire and release scripts', () => {
  let redis: RedisServer;
  let client: Redis;
  let subscriber: Redis;
  let seq = 0;

  before(async () => {
    redis = await startRedisServer();
    client = new Redis(redis.url);
    subscriber = new Redis(redis.url);
    await beginLifeScript.run(client, [LIFE_KEY], ['test-life', '30000']);
  });
  after(async () => {
    client.disconnect();
    subscriber.disconnect();
    await redis.stop();
  });

  /** A name with a holder whose lease runs out in 150 ms and a waiter queued behind it, whose grant messages are collected. */
  async function expiredHolderAndWaiter(name = `short-${process.pid}-${++seq}`) {
    const keys = lockKeys(name);
    const granting = [...keys.all, LIFE_KEY];
    const holderFence = await acquireScript.run(client, granting, ['holder', 150]);
    assert.equal(typeof holderFence, 'number', 'the holder was not granted at once');
    const waiterClient = `waiter-client-${seq}`;
    const grants: string[] = [];
    await subscriber.subscribe(GRANT_CHANNEL_PREFIX + waiterClient);
    subscriber.on('message', (channel, message) => {
      if (channel === GRANT_CHANNEL_PREFIX + waiterClient) grants.push(message);
    });
    const queued = await acquireScript.run(client, granting, ['waiter', 30_000, `60000 ${waiterClient}`]);
    assert.ok(Array.isArray(queued) && queued.length === 4, `the waiter did not queue: ${JSON.stringify(queued)}`);
    const waiterFence = String(queued[2]);
    return { keys, granting, waiterFence, grants };
  }

  it('a newcomer whose SET took a key whose lease ran out while another queues: the short acquire gives it back and replies nil; the whole one hands it to the waiter first', async () => {
    const { keys, granting, waiterFence, grants } = await expiredHolderAndWaiter();
    await sleep(300);
    assert.equal(await client.exists(keys.owner), 0, 'the holder key outlived its 150 ms lease');
    const fenceBefore = Number(await client.get(keys.fence));

    const short = await acquireShortScript.run(client, granting, ['newcomer', 30_000, '60000 newcomer-client']);
    assert.equal(short, null);
    assert.equal(await client.exists(keys.owner), 0, 'the short acquire kept a key that the queue comes first for');
    assert.deepEqual(await client.lrange(keys.queue, 0, -1), ['waiter'], 'the short acquire changed the queue');
    assert.ok(Number(await client.get(keys.fence)) > fenceBefore, 'fences must never go back');

    const whole = await acquireScript.run(client, granting, ['newcomer', 30_000, '60000 newcomer-client']);
    assert.ok(Array.isArray(whole) && whole.length === 4, `the newcomer did not queue behind the waiter: ${JSON.stringify(whole)}`);
    assert.equal(await client.get(keys.owner), `${waiterFence} waiter`);
    await eventually(() => grants.length === 1, 2_000, 'the waiter to be told of its grant');
    assert.equal(JSON.parse(grants[0])[0], waiterFence);
  });

  it('a try without queueing in the same state: the short acquire replies nil, the whole one hands the key to the waiter and refuses the try', async () => {
    const { keys, granting, waiterFence } = await expiredHolderAndWaiter();
    await sleep(300);
    assert.equal(await acquireShortScript.run(client, granting, ['trier', 30_000]), null);
    const whole = await acquireScript.run(client, granting, ['trier', 30_000]);
    assert.ok(Array.isArray(whole) && whole[0] === 0 && (whole[1] as number) > 0, `the try was not refused: ${JSON.stringify(whole)}`);
    assert.equal(await client.get(keys.owner), `${waiterFence} waiter`);
  });

  it('a holder granted at once whose release finds a waiter: the short release replies 2 and changes nothing; the whole one hands the lock on', async () => {
    const name = `short-${process.pid}-${++seq}`;
    const keys = lockKeys(name);
    const granting = [...keys.all, LIFE_KEY];
    const fence = await acquireShortScript.run(client, granting, ['holder', 30_000]);
    assert.equal(typeof fence, 'number', 'a free name was not granted by the short acquire');
    const queued = await acquireShortScript.run(client, granting, ['waiter', 30_000, '60000 waiter-client-r']);
    assert.ok(Array.isArray(queued) && queued.length === 4, `the short acquire did not queue the waiter: ${JSON.stringify(queued)}`);
    const value = `${fence} holder`;

    assert.equal(await releaseShortScript.run(client, [keys.owner, keys.queue], [value]), 2);
    assert.equal(await client.get(keys.owner), value, 'the short release let go though someone queued');
    assert.equal(await releaseScript.run(client, keys.all, [value]), 1);
    assert.equal(await client.get(keys.owner), `${queued[2]} waiter`);
  });

  it('the short release of a value that is not the owner changes nothing and replies 0; alone, it frees the key and replies 1', async () => {
    const name = `short-${process.pid}-${++seq}`;
    const keys = lockKeys(name);
    const fence = await acquireShortScript.run(client, [...keys.all, LIFE_KEY], ['holder', 30_000]);
    assert.equal(await releaseShortScript.run(client, [keys.owner, keys.queue], [`${fence} someone-else`]), 0);
    assert.equal(await client.get(keys.owner), `${fence} holder`);
    assert.equal(await releaseShortScript.run(client, [keys.owner, keys.queue], [`${fence} holder`]), 1);
    assert.equal(await client.exists(keys.owner), 0);
  });

  it("the library as the newcomer: its tryAcquire and acquire take the whole script's way and the waiter keeps its place", async () => {
    const service = lockServiceOver(await createBackend({ type: 'redis', url: redis.url }));
    try {
      const name = `short-${process.pid}-${++seq}`;
      const { keys, waiterFence } = await expiredHolderAndWaiter(`lock:${name}`);
      await sleep(300);
      assert.equal(await service.tryAcquire(name), null, 'a try took the lock a waiter was queued for');
      assert.equal(await client.get(keys.owner), `${waiterFence} waiter`);
      await assert.rejects(service.acquire(name, { waitTimeoutMs: 200 }), LockTimeoutError);
      assert.equal(await client.get(keys.owner), `${waiterFence} waiter`);
    } finally {
      await service.onApplicationShutdown();
    }
  });
});
