import { LockServerUnreachableError } from '../../errors';
import { batchToken } from '../../queue/batch';
import type { LockInspection } from '../lock-backend.interface';
import { RedisScript } from '../redis/redis-script';
import type { Answer, RedlockMasters } from './redlock-masters';
import { NOW, WAKE } from './redlock-scripts';

/** Reply: {entry id or '', pttl, fence counter, live waiting processes} on one master. */
const inspectScript = new RedisScript<[string, number, number, number]>(
  'redlock-inspect',
  `${NOW}
local time, waiting = now(), 0
local stale = redis.call('HGETALL', KEYS[4])
for i = 2, #stale, 2 do
  if tonumber(stale[i]) > time then waiting = waiting + 1 end
end
return {redis.call('GET', KEYS[1]) or '', redis.call('PTTL', KEYS[1]), tonumber(redis.call('GET', KEYS[2]) or '0'), waiting}`,
);

/** Deletes the lock on this master whoever holds it, and wakes the first live waiter. Reply: 1 when it was held here. */
const forceReleaseScript = new RedisScript<0 | 1>(
  'redlock-force-release',
  `${NOW}
${WAKE}
if redis.call('DEL', KEYS[1]) == 0 then return 0 end
-- An operator's release, as the holder's own: its lock-delay key (redlock-scripts.ts) goes too.
redis.call('DEL', KEYS[1] .. '~delay')
wake('')
return 1`,
);

/**
 * The view a majority of masters agree on: held when one entry holds the lock on a majority;
 * its token is the fence that a majority of those masters reach (the vote's token: the highest
 * counter of the replies that made the majority, written back to a majority before the grant),
 * as a batch token of the entry's first turn. Not the highest: a master whose grant came after
 * the vote was decided counted on past the token, and fewer than a majority can have. `expiresInMs`
 * is how long a majority still holds it; `waiting` is a number of waiting processes (one per
 * process and name, however many of its callers wait) that a majority report at least.
 */
export async function inspectRedlock(masters: RedlockMasters, key: string): Promise<LockInspection> {
  const sentAt = performance.now();
  const answers = await masters.round(inspectScript, key, [], 'inspect', undefined, undefined, masters.serverTimeoutMs);
  const replies = answered(masters, answers, 'inspect', key, sentAt);
  const waiting = atLeastOnMajority(replies.map(([, , , waiters]) => waiters), masters.quorum);
  const votes = new Map<string, number>();
  for (const [entry] of replies) if (entry !== '') votes.set(entry, (votes.get(entry) ?? 0) + 1);
  const owner = [...votes].find(([, count]) => count >= masters.quorum)?.[0];
  if (owner === undefined) return { held: false, waiting };
  const holding = replies.filter(([entry]) => entry === owner);
  const fence = atLeastOnMajority(holding.map(([, , counter]) => counter), masters.quorum);
  const expiresInMs = atLeastOnMajority(holding.map(([, pttlMs]) => pttlMs), masters.quorum);
  return { held: true, holder: { owner, fencingToken: batchToken(BigInt(fence), 0n), expiresInMs: Math.max(0, expiresInMs) }, waiting };
}

/** Deletes the lock on every master; true when a majority held it (the holder's lease is gone). */
export async function forceReleaseRedlock(masters: RedlockMasters, key: string): Promise<boolean> {
  const sentAt = performance.now();
  const answers = await masters.round(forceReleaseScript, key, [], 'force the release of', undefined, undefined, masters.serverTimeoutMs);
  const removed = answered(masters, answers, 'force the release of', key, sentAt).filter((reply) => reply === 1).length;
  return removed >= masters.quorum;
}

/** The replies, when a majority answered: with fewer, no majority view can be told. */
function answered<T>(masters: RedlockMasters, answers: readonly Answer<T>[], verb: string, key: string, sentAt: number): T[] {
  const replies = answers.flatMap((answer) => (answer?.ok ? [answer.value] : []));
  if (replies.length < masters.quorum) {
    throw new LockServerUnreachableError('redlock', `${verb} "${key}"`, masters.unanswered(answers), Math.round(performance.now() - sentAt), masters.firstError(answers));
  }
  return replies;
}

/** The largest value that at least `quorum` of `values` reach. */
function atLeastOnMajority(values: number[], quorum: number): number {
  return values.length < quorum ? 0 : [...values].sort((a, b) => b - a)[quorum - 1];
}
