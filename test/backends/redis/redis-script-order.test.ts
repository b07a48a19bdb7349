import assert from 'node:assert/strict';
import { Redis } from 'ioredis';
import { after, before, describe, it } from 'node:test';
import { RedisScript } from '../../../lib/backends/redis/redis-script';
import { startRedisServer, type RedisServer } from '../../../servers/redis-server';

/** Stand-ins for an acquire and the give-back or cancel sent right behind it on the same connection. */
const setScript = new RedisScript<number>('test set', "redis.call('set', KEYS[1], ARGV[1]) return 1");
const deleteScript = new RedisScript<number>('test delete', "return redis.call('del', KEYS[1])");

/**
 * Our lock scripts rely on their order on one connection: a give-back or cancel sent after an
 * acquire must run after it. EVALSHA with a fallback to EVAL on NOSCRIPT breaks that when the
 * server has the later script cached and not the earlier one (another client loaded it, as
 * after a restart): the earlier script's EVAL then runs last, and its entry outlives the
 * give-back until its ttl.
 */
describe('RedisScript keeps the order of scripts sent on one connection', () => {
  let redis: RedisServer;
  let other: Redis;
  let client: Redis;

  before(async () => {
    redis = await startRedisServer();
    other = new Redis(redis.url);
    client = new Redis(redis.url, { maxRetriesPerRequest: 0 });
    await Promise.all([other.ping(), client.ping()]);
  });
  after(async () => {
    other?.disconnect();
    client?.disconnect();
    await redis?.stop();
  });

  it('a script sent after another runs after it when the server caches only the later one', async () => {
    await deleteScript.run(other, ['first-use'], []);
    await Promise.all([setScript.run(client, ['first-use'], ['entry']), deleteScript.run(client, ['first-use'], [])]);
    assert.equal(await other.exists('first-use'), 0, 'the set ran after the delete sent behind it');
  });

  it('scripts sent while the connection comes back to a restarted server run in the order sent', async (t) => {
    // Both scripts are known to the server and used on this connection before the restart.
    await setScript.run(client, ['warm-up'], ['entry']);
    await deleteScript.run(client, ['warm-up'], []);
    await redis.server.stop('SIGKILL');
    await redis.server.restart();
    // Another client loads the delete script into the restarted server's empty cache first.
    await deleteScript.run(other, ['restarted'], []);
    // Sent while reconnecting (offline queue) or on the new socket: either way the server is new to this connection.
    t.diagnostic(`the connection was ${client.status} when the scripts were sent`);
    await Promise.all([setScript.run(client, ['restarted'], ['entry']), deleteScript.run(client, ['restarted'], [])]);
    assert.equal(await other.exists('restarted'), 0, 'the set ran after the delete sent behind it');
  });
});
