import { Logger } from '@nestjs/common';
import { SameTickBatches } from '../same-tick-batches';
import type { Answered, RedisConnections } from './redis-connection';
import { leaseField } from './redis-delay-lua';
import { lockKeys, type LockKeys } from './redis-keys';
import { acquireScript, acquireShortScript, cancelScript, checkScript, releaseShortScript, releaseScript, renewManyScript, renewScript, type AcquireReply } from './redis-lock-scripts';
import { modeAcquireScript, modeCancelScript, modeCheckScript, modeReleaseScript, modeRenewScript, type ModeAcquireReply } from './redis-mode-scripts';
import type { RedisScript } from './redis-script';
import { LIFE_KEY } from './server-life-scripts';

const KEY_CACHE_SIZE = 10_000;

/** Locks renewed by one script call at most: bounds how long one call blocks Redis. */
const RENEWALS_PER_CALL = 500;

/** A lease's periodic renewal, waiting to share a script call. */
interface Renewal {
  readonly key: string;
  readonly value: string;
  readonly ttlMs: number;
}

const logger = new Logger('DistributedLock');

/** The value of the owner key: the fence makes it unique per grant, the owner id per caller. */
export const ownerValue = (fence: bigint | string | number, owner: string) => `${fence} ${owner}`;

/** One waiting entry as the scripts take it. */
export interface QueueEntry {
  readonly owner: string;
  readonly ttlMs: number;
  /** 0: none. See redis-delay-lua.ts. */
  readonly lockDelayMs: number;
}

/** A waiting read or permit entry, with its mode as the scripts take it ('r' or 'p<limit>'). */
export interface ModeQueueEntry extends QueueEntry {
  readonly scriptMode: string;
}

/**
 * The lock scripts (redis-lock-scripts.ts) as calls on the command connection, each for one lock
 * name, bounded by serverTimeoutMs; a failure is a LockBackendError or LockServerUnreachableError
 * that names the operation and the address (see RedisConnections.send).
 */
export class RedisCommands {
  /** Key names per lock key, built once: apps lock a bounded set of names, and a cycle needs them twice. */
  private readonly keyCache = new Map<string, LockKeys>();
  /** The keys of the scripts that grant: the lock's and the server's life marker (none on a Cluster, see LIFE_KEY). */
  private readonly grantingKeyCache = new Map<string, readonly string[]>();
  private readonly lifeKeys: readonly string[];

  /**
   * Renewals due in one tick, sent as one script call; undefined on a Cluster, whose names hash
   * to different slots while a script may only touch one (there each lock renews on its own).
   */
  private readonly renewals?: SameTickBatches<Renewal, 0 | 1>;

  constructor(
    private readonly connections: RedisConnections,
    private readonly clientId: string,
    /** What a script that may grant waits for first, if anything (ReconnectCheck.before). */
    private readonly beforeGrant: () => Promise<void> | undefined = () => undefined,
  ) {
    const cluster = (connections.client as { isCluster?: boolean }).isCluster === true;
    this.lifeKeys = cluster ? [] : [LIFE_KEY];
    if (!cluster) {
      this.renewals = new SameTickBatches(RENEWALS_PER_CALL, (renewals) => this.renewMany(renewals));
    }
  }

  /**
   * The acquire script without queueing (see AcquireReply): the short one, and the whole one
   * only where a lease ran out while others queue (see acquireShortScript).
   */
  tryAcquire(key: string, owner: string, ttlMs: number, lockDelayMs = 0): Promise<AcquireReply> {
    const before = this.beforeGrant();
    if (before) return before.then(() => this.tryAcquire(key, owner, ttlMs, lockDelayMs));
    const args = [owner, leaseField(ttlMs, lockDelayMs)];
    const keys = this.grantingKeys(key);
    return this.run(acquireShortScript, 'try to acquire', key, args, keys).then((reply) => reply ?? this.run(acquireScript, 'try to acquire', key, args, keys));
  }

  /**
   * The acquire script for an entry that may queue, its answer handed to `answered`: the short
   * one, and the whole one where the short one could not do it (see acquireShortScript), unless
   * the entry stopped waiting meanwhile (`waiting`): its cancel ran already, and nothing of it
   * is left on the server, so the answer is a refusal.
   */
  acquire(key: string, owner: string, ttlMs: number, lockDelayMs: number, staleAfterMs: number, waiting: () => boolean, answered: Answered<AcquireReply>): void {
    const before = this.beforeGrant();
    if (before) return void before.then(() => this.acquire(key, owner, ttlMs, lockDelayMs, staleAfterMs, waiting, answered), (error: Error) => answered(error, undefined, 0));
    const args = [owner, leaseField(ttlMs, lockDelayMs), `${staleAfterMs} ${this.clientId}`];
    const keys = this.grantingKeys(key);
    this.connections.runCallTo(acquireShortScript.call(keys, args), 'acquire', key, (error, reply, tag) => {
      if (error || reply !== null) return answered(error, reply ?? undefined, tag);
      if (!waiting()) return answered(undefined, [0, 0], tag);
      this.connections.runCallTo(acquireScript.call(keys, args), 'acquire', key, answered, tag);
    });
  }

  /**
   * 1 when the grant `value` ('<fence> <owner>') was still the owner and is extended, else 0.
   * A lease's periodic renewal (`verb` 'renew') may share a script call with others due in the
   * same tick; a hand-over's waits on nobody.
   */
  renew(key: string, value: string, ttlMs: number, verb = 'renew', lockDelayMs = 0): Promise<0 | 1> {
    // A lease with a lock-delay renews its delay key too: a script of its own (see renewScript).
    if (lockDelayMs > 0) return this.run(renewScript, verb, key, [value, ttlMs, Math.ceil(lockDelayMs)], this.keysOf(key).ownerOnly);
    if (verb === 'renew' && this.renewals) return this.renewals.add({ key, value, ttlMs });
    return this.renewOne(key, value, ttlMs, verb);
  }

  private renewOne(key: string, value: string, ttlMs: number, verb: string): Promise<0 | 1> {
    return this.run(renewScript, verb, key, [value, ttlMs], this.keysOf(key).ownerOnly);
  }

  /** A lone renewal as the single-lock script; more as one renewManyScript call. */
  private async renewMany(renewals: readonly Renewal[]): Promise<(0 | 1)[]> {
    if (renewals.length === 1) {
      const [only] = renewals;
      return [await this.renewOne(only.key, only.value, only.ttlMs, 'renew')];
    }
    const keys = renewals.map((renewal) => this.keysOf(renewal.key).owner);
    const args = [...renewals.map((renewal) => renewal.value), ...renewals.map((renewal) => renewal.ttlMs)];
    const renewed = await this.connections.runScript(renewManyScript, keys, args, `renew ${renewals.length} locks`);
    return renewed.map((one) => (one === 1 ? 1 : 0));
  }

  /**
   * Owner-checked against `value` ('<fence> <owner>'); the reply (0: not ours) changes nothing
   * for the caller. `mayDelay`: the holder may have a lock-delay key to delete. `grantedAtOnce`:
   * the holder never queued, so most likely nobody queues behind it either: the short script
   * first, and the whole one only when others queue after all (a second round trip). A holder
   * that queued sends the whole one: in a burst, others queue behind it too.
   */
  release(key: string, value: string, mayDelay = false, grantedAtOnce = false): Promise<void> {
    const args = mayDelay ? [value, 1] : [value];
    if (!grantedAtOnce) return this.run(releaseScript, 'release', key, args) as Promise<unknown> as Promise<void>;
    return this.run(releaseShortScript, 'release', key, args, this.keysOf(key).ownerAndQueue).then((released) => {
      if (released === 2) return this.run(releaseScript, 'release', key, args) as Promise<unknown> as Promise<void>;
    });
  }

  /** Leaves the queue (handing on a grant that raced); `quiet` after a failure, when the server may well be down. */
  cancel(key: string, owner: string, quiet = false): Promise<unknown> {
    return this.leave(cancelScript, key, owner, quiet);
  }

  check(key: string, staleAfterMs: number, entries: Iterable<QueueEntry>): ReturnType<typeof checkScript.run> {
    const before = this.beforeGrant();
    if (before) return before.then(() => this.check(key, staleAfterMs, entries));
    const args: (string | number)[] = [this.clientId, staleAfterMs];
    for (const entry of entries) args.push(entry.owner, leaseField(entry.ttlMs, entry.lockDelayMs));
    return this.run(checkScript, 'check the queue of', key, args, this.grantingKeys(key));
  }

  /** The mode acquire script (see ModeAcquireReply); it queues when `staleAfterMs` is given. */
  acquireMode(key: string, owner: string, ttlMs: number, mode: string, staleAfterMs?: number): Promise<ModeAcquireReply> {
    const before = this.beforeGrant();
    if (before) return before.then(() => this.acquireMode(key, owner, ttlMs, mode, staleAfterMs));
    const args = staleAfterMs === undefined ? [owner, ttlMs, mode] : [owner, ttlMs, mode, `${staleAfterMs} ${this.clientId}`];
    return this.run(modeAcquireScript, staleAfterMs === undefined ? 'try to acquire' : 'acquire', key, args, this.grantingKeys(key));
  }

  /** renew() for a read or permit entry, owner-checked against `value` ('<fence> <owner>'). */
  renewMode(key: string, value: string, ttlMs: number, verb = 'renew'): Promise<0 | 1> {
    return this.run(modeRenewScript, verb, key, [value, ttlMs]);
  }

  /** release() for a read or permit entry: the entries that may go then are granted. */
  releaseMode(key: string, value: string): Promise<void> {
    return this.run(modeReleaseScript, 'release', key, [value]) as Promise<unknown> as Promise<void>;
  }

  /** cancel() for a read or permit entry. */
  cancelMode(key: string, owner: string, quiet = false): Promise<unknown> {
    return this.leave(modeCancelScript, key, owner, quiet);
  }

  checkModes(key: string, staleAfterMs: number, entries: Iterable<ModeQueueEntry>): ReturnType<typeof modeCheckScript.run> {
    const before = this.beforeGrant();
    if (before) return before.then(() => this.checkModes(key, staleAfterMs, entries));
    const args: (string | number)[] = [this.clientId, staleAfterMs];
    for (const entry of entries) args.push(entry.owner, entry.ttlMs, entry.scriptMode);
    return this.run(modeCheckScript, 'check the queue of', key, args, this.grantingKeys(key));
  }

  private leave(script: RedisScript<0 | 1>, key: string, owner: string, quiet: boolean): Promise<unknown> {
    return this.run(script, 'leave the queue of', key, [owner]).catch((error) => {
      if (!quiet) logger.warn(`Leaving the queue of "${key}" failed; the entry goes stale on its own: ${error.message}`);
    });
  }

  private run<Reply>(script: RedisScript<Reply>, verb: string, key: string, args: readonly (string | number)[], keys = this.keysOf(key).all): Promise<Reply> {
    return this.connections.runScript(script, keys, args, verb, key);
  }

  private grantingKeys(key: string): readonly string[] {
    let keys = this.grantingKeyCache.get(key);
    if (!keys) {
      if (this.grantingKeyCache.size >= KEY_CACHE_SIZE) this.grantingKeyCache.clear();
      this.grantingKeyCache.set(key, (keys = [...this.keysOf(key).all, ...this.lifeKeys]));
    }
    return keys;
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
