import { DEFAULT_KEY_PREFIX } from '../../lock-defaults';
import type { LockHolder } from '../lock-backend.interface';
import { clientIdOf, holderRecordKey, readHolderRecordsScript, withDescriptions } from '../redis/redis-holder-records';
import type { RedlockMasters } from './redlock-masters';

/**
 * `holders` with the descriptions their processes recorded on the masters (each process writes
 * its record to every master: RedisHolderRecords). One read per master, all at once; the first
 * master that has every description answers, and a master slower than the per-master request
 * timeout is not waited for: a description is best effort, and inspect stays within its bound.
 */
export function describeRedlockHolders(masters: RedlockMasters, keyPrefix: string | undefined, holders: readonly LockHolder[]): Promise<LockHolder[]> {
  const ids = [...new Set(holders.map((holder) => clientIdOf(holder.owner)).filter((id): id is string => id !== undefined))];
  if (ids.length === 0) return Promise.resolve([...holders]);
  const keys = ids.map((id) => holderRecordKey(keyPrefix ?? DEFAULT_KEY_PREFIX, id));
  const found = new Map<string, string>();
  return new Promise((resolve) => {
    let pending = masters.connections.length;
    let finished = false;
    const finish = () => {
      if (finished) return;
      finished = true;
      clearTimeout(timer);
      resolve(withDescriptions(holders, found));
    };
    const timer = setTimeout(finish, masters.requestTimeoutMs);
    for (const connections of masters.connections) {
      connections.runScript(readHolderRecordsScript, keys, [], 'read the holder descriptions').then(
        (values) => {
          values.forEach((value, i) => value !== '' && !found.has(ids[i]) && found.set(ids[i], value));
          if (found.size === ids.length || --pending === 0) finish();
        },
        () => --pending === 0 && finish(),
      );
    }
  });
}
