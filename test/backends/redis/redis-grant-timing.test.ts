import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { parseGrantMessage } from '../../../lib/backends/redis/redis-grant-message';
import { ServerClock } from '../../../lib/backends/server-clock';

/** The pieces that time a pushed grant, without a server: see docs/redis.md, "A grant that arrives late". */
describe('redis grant timing', () => {
  it('maps a server time to a local time no later than when it happened, from the tightest reply', () => {
    const clock = new ServerClock();
    assert.equal(clock.earliestLocal(5_000), -Infinity, 'no reply yet: nothing is known');
    const now = performance.now();
    // The server's clock is 1_000_000 ms ahead; replies took 10 ms and 2 ms to be made after the send.
    const offset = 1_000_000;
    clock.sample(Math.floor(now - 50 + 10 + offset), now - 50);
    clock.sample(Math.floor(now - 20 + 2 + offset), now - 20);
    // A looser sample later changes nothing.
    clock.sample(Math.floor(now - 5 + 4 + offset), now - 5);
    const grantedAtServer = Math.floor(now - 10 + offset);
    const earliest = clock.earliestLocal(grantedAtServer);
    const truth = grantedAtServer - offset;
    assert.ok(earliest <= truth, `mapped to ${earliest}, after the true local time ${truth}`);
    // The bound is as tight as the fastest reply (2 ms) plus the millisecond TIME drops, plus drift.
    assert.ok(truth - earliest <= 3.1, `mapped ${truth - earliest} ms early`);
  });

  it('takes grants in the release script format, with or without the server time, and nothing else', () => {
    assert.deepEqual(parseGrantMessage('["12","lock:a","owner-1","1732400000123"]'), { fence: '12', key: 'lock:a', owner: 'owner-1', serverMs: 1732400000123 });
    assert.deepEqual(parseGrantMessage('["12","lock:a","owner-1"]'), { fence: '12', key: 'lock:a', owner: 'owner-1', serverMs: undefined });
    for (const stray of ['not json', '', 'null', '42', '{"fence":"1"}', '[1,"k","o"]', '["x","k","o"]', '["1","k"]', '["1","k","o","soon"]', '["1","k","o","1","extra"]', '["1",null,"o"]']) {
      assert.equal(parseGrantMessage(stray), undefined, stray);
    }
  });
});
