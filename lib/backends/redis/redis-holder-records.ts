import { Logger } from '@nestjs/common';
import { DEFAULT_KEY_PREFIX, HOLDER_RECORD_REFRESH_MS, HOLDER_RECORD_TTL_MS } from '../../lock-defaults';
import type { LockHolder, LockInspection } from '../lock-backend.interface';
import type { RedisConnections } from './redis-connection';
import { hashTag } from './redis-keys';
import { RedisScript } from './redis-script';


/** The 16 base64url characters (96 random bits) that every owner id of one backend client starts with. */
const CLIENT_ID = /^([A-Za-z0-9_-]{16})~/;

const logger = new Logger('DistributedLock');

const writeScript = new RedisScript<1>('holder-record', "redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2]) return 1");
const removeScript = new RedisScript<number>('holder-record-remove', "return redis.call('DEL', KEYS[1])");
/** Reply: each key's value, '' where there is none (a description is never empty). */
export const readHolderRecordsScript = new RedisScript<string[]>(
  'holder-record-read',
  "local out = {} for i, key in ipairs(KEYS) do out[i] = redis.call('GET', key) or '' end return out",
);

/**
 * Where a backend client's holder description is kept: `{<keyPrefix>}~holder~<client id>`. It
 * starts with `{<keyPrefix>`, so the ACL pattern of the lock keys covers it; the `}` is followed
 * by `~` where a native lock key's is followed by `:`, so it is no lock's key whatever the name;
 * and every record of a prefix hashes to one Cluster slot, so one script reads them all.
 */
export function holderRecordKey(keyPrefix: string, clientId: string): string {
  return `${hashTag(keyPrefix)}~holder~${clientId}`;
}

/** The client id an owner id was made by (`<client id>~q<n>` for a queued batch, `~t<n>` for a try), or undefined for another's. */
export function clientIdOf(owner: string): string | undefined {
  return CLIENT_ID.exec(owner)?.[1];
}

/**
 * One backend client's holder description at Redis (on each Redlock master): written when the
 * backend starts and every HOLDER_RECORD_REFRESH_MS with an expiry, so nothing is written per lock and no
 * lock call waits for it; removed at close. Best effort throughout: a write that fails (a server
 * down, an ACL that refuses the key) only means inspect shows no description until one succeeds.
 */
export class RedisHolderRecords {
  private readonly key: string;
  private readonly timer: NodeJS.Timeout;
  private failed = false;

  constructor(
    private readonly connections: readonly RedisConnections[],
    keyPrefix: string | undefined,
    clientId: string,
    private readonly description: string,
  ) {
    this.key = holderRecordKey(keyPrefix ?? DEFAULT_KEY_PREFIX, clientId);
    this.write();
    this.timer = setInterval(() => this.write(), HOLDER_RECORD_REFRESH_MS);
    this.timer.unref();
  }

  /** Stops the refreshes and deletes the record; resolves when every server answered or failed. */
  remove(): Promise<unknown> {
    clearInterval(this.timer);
    return Promise.allSettled(this.connections.map((connections) => connections.runScript(removeScript, [this.key], [], 'remove the holder description')));
  }

  private write(): void {
    for (const connections of this.connections) {
      connections.runScript(writeScript, [this.key], [this.description, HOLDER_RECORD_TTL_MS], 'record the holder description').then(
        () => (this.failed = false),
        (error: Error) => {
          // Once per run of failures: the locks are not affected, only what inspect can show.
          if (!this.failed) logger.debug(`The holder description was not recorded at ${connections.address}, inspect shows none until it is: ${error.message}`);
          this.failed = true;
        },
      );
    }
  }
}

/**
 * `holders` with the descriptions their clients recorded, read in one script call (after the
 * inspect script: the record's key is known only from the holder's owner id). Best effort: a
 * read that fails leaves the holders without one.
 */
export async function describeHolders(connections: RedisConnections, keyPrefix: string | undefined, holders: readonly LockHolder[]): Promise<LockHolder[]> {
  const ids = [...new Set(holders.map((holder) => clientIdOf(holder.owner)).filter((id): id is string => id !== undefined))];
  if (ids.length === 0) return [...holders];
  const prefix = keyPrefix ?? DEFAULT_KEY_PREFIX;
  let values: string[];
  try {
    values = await connections.runScript(readHolderRecordsScript, ids.map((id) => holderRecordKey(prefix, id)), [], 'read the holder descriptions');
  } catch {
    return [...holders];
  }
  return withDescriptions(holders, new Map(ids.map((id, i) => [id, values[i]])));
}

/** `holders`, each with its client's description from `byClientId` where it has a non-empty one. */
export function withDescriptions(holders: readonly LockHolder[], byClientId: ReadonlyMap<string, string | undefined>): LockHolder[] {
  return holders.map((holder) => {
    const id = clientIdOf(holder.owner);
    const description = id === undefined ? undefined : byClientId.get(id);
    return description ? { ...holder, description } : holder;
  });
}

/** `inspection` with its holders described by `describe` (which keeps their order); one without holders as it is. */
export async function describedInspection(inspection: LockInspection, describe: (holders: readonly LockHolder[]) => Promise<LockHolder[]>): Promise<LockInspection> {
  const holders = inspection.holders ?? (inspection.holder ? [inspection.holder] : []);
  if (holders.length === 0) return inspection;
  const described = await describe(holders);
  return { ...inspection, holder: described[0], ...(inspection.holders ? { holders: described } : {}) };
}
