import { batchToken } from '../../../queue/batch';
import type { LockHolder, LockInspection } from '../../lock-backend.interface';
import type { RedisConnections } from '../redis-connection';
import type { PlainLockKeys } from './redis-plain-keys';
import { plainForceReleaseScript, plainInspectScript, RELEASE_CHANNEL } from './redis-plain-scripts';

/** A value this library wrote: `<fence> <owner>`. */
const OUR_VALUE = /^(\d+) (.+)$/s;

/**
 * The lock key's holder, from Redis, and this library's batches waiting for it (plain clients
 * that wait leave no trace in Redis). A holder of this library shows its owner id and token (its batch's first turn); a
 * plain client's shows its own value as `owner`, and as token the fence counter's value, the
 * token of the last grant of ours, which the next grant of ours exceeds.
 */
export async function inspectPlainLock(connections: RedisConnections, keys: PlainLockKeys): Promise<LockInspection> {
  const [value, pttlMs, fence, waiting] = await connections.runScript(plainInspectScript, keys.all, [], 'inspect', keys.lock);
  if (value === '') return { held: false, waiting };
  const ours = OUR_VALUE.exec(value);
  const holder: LockHolder = {
    owner: ours ? ours[2] : value,
    fencingToken: batchToken(BigInt(ours ? ours[1] : fence), 0n),
    ...(pttlMs >= 0 ? { expiresInMs: pttlMs } : {}),
  };
  return { held: true, mode: 'write', holder, holders: [holder], waiting };
}

/** Deletes the lock key whoever holds it, announced to this library's waiters. */
export async function forceReleasePlainLock(connections: RedisConnections, keys: PlainLockKeys): Promise<boolean> {
  return (await connections.runScript(plainForceReleaseScript, keys.all, [RELEASE_CHANNEL, keys.lock], 'force the release of', keys.lock)) === 1;
}
