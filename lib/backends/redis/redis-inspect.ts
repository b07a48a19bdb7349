import { batchToken } from '../../queue/batch';
import type { EntryMode, LockHolder, LockInspection } from '../lock-backend.interface';
import type { RedisConnections } from './redis-connection';
import { lockKeys } from './redis-keys';
import { SHARED_VALUE } from './redis-mode-lua';
import { forceReleaseScript, inspectScript } from './redis-mode-scripts';

/**
 * The owner key's value and expiry, the read or permit holders, and the live queue entries.
 * One write or read entry stands for a batch of one process's callers (LocalQueues), so `waiting`
 * counts entries, not callers, and a read entry's readers show as one holder. A token is the
 * entry's fence as a batch token of its first turn: what the server records (later turns under
 * the same entry are served in the holder's process, and their tokens are higher).
 */
export async function inspectRedisLock(connections: RedisConnections, key: string): Promise<LockInspection> {
  const [value, pttlMs, waiting, shared, serverMs] = await connections.runScript(inspectScript, lockKeys(key).all, [], 'inspect', key);
  if (value === SHARED_VALUE) return sharedInspection(shared, serverMs, waiting);
  const space = value.indexOf(' ');
  if (space === -1) return { held: false, waiting };
  const holder: LockHolder = { owner: value.slice(space + 1), fencingToken: batchToken(BigInt(value.slice(0, space)), 0n), ...(pttlMs >= 0 ? { expiresInMs: pttlMs } : {}) };
  return { held: true, mode: 'write', holder, holders: [holder], waiting };
}

/** Read or permit holders, from the inspect script's `{owner, fence, mode, grantedAtMs, leaseEndMs, ...}`, oldest grant first. */
function sharedInspection(fields: readonly string[], serverMs: number, waiting: number): LockInspection {
  const holders: LockHolder[] = [];
  let mode: EntryMode = 'read';
  let limit: number | undefined;
  for (let i = 0; i < fields.length; i += 5) {
    const [owner, fence, entryMode, grantedAt, leaseEnd] = fields.slice(i, i + 5);
    if (entryMode !== 'r') {
      mode = 'permit';
      limit = Number(entryMode.slice(1));
    }
    holders.push({ owner, fencingToken: batchToken(BigInt(fence), 0n), heldForMs: serverMs - Number(grantedAt), expiresInMs: Number(leaseEnd) - serverMs });
  }
  holders.sort((a, b) => (a.fencingToken < b.fencingToken ? -1 : 1));
  if (holders.length === 0) return { held: false, waiting };
  return { held: true, mode, ...(limit !== undefined ? { limit } : {}), holder: holders[0], holders, waiting };
}

/** Removes every holder, whatever its mode: the entries that may go then are granted by a message, as at any release. */
export async function forceReleaseRedisLock(connections: RedisConnections, key: string): Promise<boolean> {
  return (await connections.runScript(forceReleaseScript, lockKeys(key).all, [], 'force the release of', key)) === 1;
}
