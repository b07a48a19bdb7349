import { Logger } from '@nestjs/common';
import type { RedisConnections } from './redis-connection';
import { lockKeys, type LockKeys } from './redis-keys';
import { acquireScript, cancelScript, checkScript, releaseScript, renewScript } from './redis-lock-scripts';
import type { RedisScript } from './redis-script';

const KEY_CACHE_SIZE = 10_000;

const logger = new Logger('DistributedLock');

/** The value of the owner key: the fence makes it unique per grant, the owner id per caller. */
export const ownerValue = (fence: bigint | string, owner: string) => `${fence} ${owner}`;

/** One waiting entry as the scripts take it. */
export interface QueueEntry {
  readonly owner: string;
  readonly ttlMs: number;
}

/**
 * The lock scripts (redis-lock-scripts.ts) as calls on the command connection, each for one lock
 * name, bounded by serverTimeoutMs; a failure is a LockBackendError or LockServerUnreachableError
 * that names the operation and the address (see RedisConnections.send).
 */
export class RedisCommands {
  /** Key names per lock key, built once: apps lock a bounded set of names, and a cycle needs them twice. */
  private readonly keyCache = new Map<string, LockKeys>();

  constructor(
    private readonly connections: RedisConnections,
    private readonly clientId: string,
  ) {}

  acquire(key: string, owner: string, ttlMs: number, staleAfterMs: number, mayQueue: boolean) {
    const args = [owner, ttlMs, this.clientId, staleAfterMs, key, mayQueue ? '1' : '0'];
    return this.run(acquireScript, mayQueue ? 'acquire' : 'try to acquire', key, args);
  }

  /** 1 when the grant `value` ('<fence> <owner>') was still the owner and is extended, else 0. */
  renew(key: string, value: string, ttlMs: number, verb = 'renew'): Promise<0 | 1> {
    return this.run(renewScript, verb, key, [value, ttlMs], [this.keysOf(key).owner]);
  }

  /**
   * One round trip, owner-checked against `value` ('<fence> <owner>'); the reply (0: not ours)
   * changes nothing for the caller.
   */
  release(key: string, value: string): Promise<void> {
    return this.run(releaseScript, 'release', key, [value, key]) as Promise<unknown> as Promise<void>;
  }

  /** Leaves the queue (handing on a grant that raced); `quiet` after a failure, when the server may well be down. */
  cancel(key: string, owner: string, quiet = false): Promise<unknown> {
    return this.run(cancelScript, 'leave the queue of', key, [owner, key]).catch((error) => {
      if (!quiet) logger.warn(`Leaving the queue of "${key}" failed; the entry goes stale on its own: ${error.message}`);
    });
  }

  check(key: string, staleAfterMs: number, entries: Iterable<QueueEntry>) {
    const args: (string | number)[] = [this.clientId, staleAfterMs, key];
    for (const entry of entries) args.push(entry.owner, entry.ttlMs);
    return this.run(checkScript, 'check the queue of', key, args);
  }

  private run<Reply>(script: RedisScript<Reply>, verb: string, key: string, args: readonly (string | number)[], keys = this.keysOf(key).all): Promise<Reply> {
    return this.connections.send(script.run(this.connections.client, keys, args), verb, key);
  }

  private keysOf(key: string): LockKeys {
    let keys = this.keyCache.get(key);
    if (!keys) {
      // Names built from unbounded values (order ids) would grow the cache forever: start over.
      if (this.keyCache.size >= KEY_CACHE_SIZE) this.keyCache.clear();
      this.keyCache.set(key, (keys = lockKeys(key)));
    }
    return keys;
  }
}
