import { Logger } from '@nestjs/common';
import { LockConfigError } from '../../errors';
import { batchToken } from '../../queue/batch';
import type { AcquireRequest, LockGrant } from '../lock-backend.interface';
import { PendingWait } from '../../queue/pending-wait';
import { isStoppable } from '../built-in-backend';
import { isLate } from './redis-batch-leases';
import { ownerValue } from './redis-commands';
import type { RedisConnections } from './redis-connection';
import { KeyWatches, type KeyWatch } from './redis-key-watches';
import { lockKeys } from './redis-keys';
import { modeAcquireScript, modeCancelScript, modeCheckScript, modeReleaseScript, modeRenewScript, type ModeAcquireReply } from './redis-mode-scripts';
import type { RedisScript } from './redis-script';

const logger = new Logger('DistributedLock');

/** One read or permit caller's own entry at the server, while it waits. */
interface ModeEntry {
  readonly key: string;
  /** The caller's owner id: its entry's id at the server. */
  readonly owner: string;
  readonly ttlMs: number;
  /** 'r', or 'p<limit>', as the scripts take it. */
  readonly mode: string;
  readonly wait: PendingWait<LockGrant>;
  /** performance.now() before the acquire script was sent: no grant of the entry began earlier. */
  readonly askedAt: number;
  /** A late grant is being confirmed with the server. */
  confirming: boolean;
}

/** A read or permit grant held in this process, with the owner key value its scripts check. */
interface HeldEntry {
  readonly grant: LockGrant;
  readonly value: string;
}

/** What the entries need of their backend. */
export interface ModeEntriesHost {
  readonly connections: RedisConnections;
  readonly clientId: string;
  /** Fired when the backend closes: every grant's `lost`. */
  readonly lost: AbortSignal;
  isOpen(): boolean;
  closedWhileWaiting(): Error;
}

/** The scripts' mode for a request: 'r', or 'p<limit>' with the limit checked. */
function modeOf({ mode, limit, key }: Pick<AcquireRequest, 'mode' | 'limit' | 'key'>): string {
  if (mode === 'read') return 'r';
  if (mode !== 'permit') throw new LockConfigError('mode', `the redis backend grants 'write', 'read' or 'permit', got ${String(mode)} for "${key}".`);
  if (!Number.isSafeInteger(limit) || limit! < 1) throw new LockConfigError('limit', `a permit of "${key}" needs a positive integer limit, got ${String(limit)}.`);
  return `p${limit}`;
}

/**
 * Read and permit entries on Redis: one server entry per caller (no batching: readers of one
 * process never wait for each other, and each permit takes its own place), granted by the scripts
 * of redis-mode-scripts.ts in the name's one queue with the write entries. A waiter is told by
 * the grant message on the process's channel, as a write entry is; a safety check per name, timed
 * by the earliest lease end that could change its answer, finds lost messages and dead holders.
 */
export class RedisModeEntries {
  private readonly waiting = new Map<string, ModeEntry>();
  private readonly held = new Map<string, HeldEntry>();
  private readonly watches = new KeyWatches<ModeEntry>((key, watch) => void this.check(key, watch));

  constructor(private readonly host: ModeEntriesHost) {}

  /** Read or permit grants held now: the backend asks the entries only when there are some. */
  get heldCount(): number {
    return this.held.size;
  }

  async acquire(request: AcquireRequest): Promise<LockGrant> {
    const mode = modeOf(request);
    const ttlMs = Math.ceil(request.ttlMs);
    const entry: ModeEntry = { key: request.key, owner: request.owner, ttlMs, mode, wait: new PendingWait<LockGrant>(), askedAt: performance.now(), confirming: false };
    this.waiting.set(entry.owner, entry);
    const abandoned = () => this.leave(entry, false);
    if (isStoppable(request)) entry.wait.watch(request, abandoned);
    else entry.wait.listen(request.signal, abandoned);
    if (!entry.wait.isSettled) {
      const args = [entry.owner, ttlMs, mode, `${this.watches.staleAfter(entry.key, ttlMs)} ${this.host.clientId}`];
      this.run(modeAcquireScript, 'acquire', entry.key, args).then(
        (reply) => this.answered(entry, reply),
        (error) => {
          if (entry.wait.reject(error)) this.leave(entry, true);
        },
      );
    }
    return entry.wait.promise;
  }

  /** Granted only if the rule lets the entry go right now; never queued. */
  async tryAcquire(request: Omit<AcquireRequest, 'signal'>): Promise<LockGrant | null> {
    const mode = modeOf(request);
    const ttlMs = Math.ceil(request.ttlMs);
    const sentAt = performance.now();
    let reply: ModeAcquireReply;
    try {
      reply = await this.run(modeAcquireScript, 'try to acquire', request.key, [request.owner, ttlMs, mode]);
    } catch (error) {
      // The script may still run (a paused server wakes up): the cancel, sent after it, gives back what it took.
      void this.cancel(request.key, request.owner, true);
      throw error;
    }
    if (typeof reply === 'number') return this.hold(request.key, request.owner, String(reply), sentAt);
    if (reply[0] === -1) throw this.limitError(request.key, mode, reply[1]);
    return null;
  }

  /** Owner-checked; false when the lease is no longer this grant's. */
  async renew(grant: LockGrant, ttlMs: number): Promise<boolean> {
    const held = this.heldFor(grant);
    if (!held || !this.host.isOpen()) return false;
    return (await this.run(modeRenewScript, 'renew', grant.key, [held.value, Math.ceil(ttlMs)])) === 1;
  }

  /** Owner-checked and idempotent: a grant not held here is a no-op. */
  async release(grant: LockGrant): Promise<void> {
    const held = this.heldFor(grant);
    if (!held) return;
    this.held.delete(grant.owner);
    await this.run(modeReleaseScript, 'release', grant.key, [held.value]);
  }

  /** Whether `grant` is a read or permit grant held here. */
  holds(grant: LockGrant): boolean {
    return this.heldFor(grant) !== undefined;
  }

  /**
   * A grant message (or check) for `owner`: true when it is one of these entries'. A grant nobody
   * waits for any more needs nothing: the entry's cancel, sent when it stopped waiting, gives it back.
   */
  granted(owner: string, fence: string, serverMs: number | undefined): boolean {
    const entry = this.waiting.get(owner);
    if (!entry) return this.held.has(owner);
    if (entry.confirming || entry.wait.isSettled) return true;
    const clock = this.watches.get(entry.key)?.clock;
    const requestedAt = Math.max(entry.askedAt, serverMs === undefined || !clock ? -Infinity : clock.earliestLocal(serverMs));
    if (!isLate(requestedAt, entry.ttlMs)) {
      this.grant(entry, fence, requestedAt);
      return true;
    }
    entry.confirming = true;
    const value = ownerValue(fence, owner);
    const sentAt = performance.now();
    this.run(modeRenewScript, 'confirm a late grant of', entry.key, [value, entry.ttlMs]).then(
      (renewed) => {
        entry.confirming = false;
        if (entry.wait.isSettled) return;
        // The lease ran out before we heard of it: the safety check puts the entry back in the queue.
        if (renewed === 1) this.grant(entry, fence, sentAt);
        else this.watches.schedule(entry.key, -1, 0);
      },
      (error) => {
        entry.confirming = false;
        if (entry.wait.reject(error)) this.leave(entry, true);
      },
    );
    return true;
  }

  /** The subscriber reconnected: grants published meanwhile are lost, so every waiting name is checked now. */
  recheckAll(): void {
    for (const key of this.watches.keys()) this.watches.schedule(key, -1, 0);
  }

  /** Ends every wait (each entry's cancel sent), releases every held entry; resolves when those calls are answered or failed. */
  close(): Promise<unknown>[] {
    const work: Promise<unknown>[] = [];
    for (const entry of [...this.waiting.values()]) {
      if (entry.wait.reject(this.host.closedWhileWaiting())) work.push(this.leave(entry, true));
    }
    for (const { grant, value } of this.held.values()) {
      work.push(this.run(modeReleaseScript, 'release', grant.key, [value]).catch(() => undefined));
    }
    this.held.clear();
    this.watches.clear();
    return work;
  }

  private answered(entry: ModeEntry, reply: ModeAcquireReply): void {
    // Withdrawn (its cancel, sent after, gives back what the script took), or granted by a message that came first.
    if (entry.wait.isSettled || this.waiting.get(entry.owner) !== entry) return;
    if (typeof reply === 'number') return this.grant(entry, String(reply), entry.askedAt);
    if (reply[0] === -1) {
      if (entry.wait.reject(this.limitError(entry.key, entry.mode, reply[1]))) this.waiting.delete(entry.owner);
      return;
    }
    const [, nextChangeMs, , serverMs] = reply as [0, number, string, number];
    this.watches.add(entry).clock.sample(serverMs, entry.askedAt);
    this.watches.schedule(entry.key, nextChangeMs);
  }

  private grant(entry: ModeEntry, fence: string, requestedAt: number): void {
    this.forget(entry);
    const grant = this.hold(entry.key, entry.owner, fence, requestedAt);
    // The caller stopped waiting at this very moment: what it was granted goes back.
    if (!entry.wait.resolve(grant)) void this.release(grant).catch(() => undefined);
  }

  private hold(key: string, owner: string, fence: string, requestedAt: number): LockGrant {
    const grant: LockGrant = { key, owner, fencingToken: batchToken(BigInt(fence), 0n), lost: this.host.lost, requestedAt };
    this.held.set(owner, { grant, value: ownerValue(fence, owner) });
    return grant;
  }

  /** The entry stops waiting: its cancel leaves the queue and gives back a grant that raced. */
  private leave(entry: ModeEntry, quiet: boolean): Promise<unknown> {
    this.forget(entry);
    return this.cancel(entry.key, entry.owner, quiet);
  }

  private cancel(key: string, owner: string, quiet: boolean): Promise<unknown> {
    return this.run(modeCancelScript, 'leave the queue of', key, [owner]).catch((error) => {
      if (!quiet) logger.warn(`Leaving the queue of "${key}" failed; the entry goes stale on its own: ${error.message}`);
    });
  }

  private forget(entry: ModeEntry): void {
    if (this.waiting.get(entry.owner) === entry) this.waiting.delete(entry.owner);
    this.watches.remove(entry.key, entry.owner);
  }

  private async check(key: string, watch: KeyWatch<ModeEntry>): Promise<void> {
    const entries = [...watch.waiters.values()];
    if (entries.length === 0 || !this.host.isOpen()) return;
    const args: (string | number)[] = [this.host.clientId, this.watches.staleAfter(key, watch.shortestTtlMs)];
    for (const entry of entries) args.push(entry.owner, entry.ttlMs, entry.mode);
    const sentAt = performance.now();
    try {
      const [nextChangeMs, granted, , serverMs] = await this.run(modeCheckScript, 'check the queue of', key, args);
      watch.clock.sample(serverMs, sentAt);
      for (let i = 0; i < granted.length; i += 3) this.granted(granted[i], granted[i + 1], Number(granted[i + 2]));
      this.watches.schedule(key, nextChangeMs);
    } catch (error) {
      logger.warn(`Checking the queue of "${key}" failed, retrying: ${(error as Error).message}`);
      this.watches.schedule(key, -1);
    }
  }

  private heldFor(grant: LockGrant): HeldEntry | undefined {
    const held = this.held.get(grant.owner);
    return held?.grant.fencingToken === grant.fencingToken ? held : undefined;
  }

  private limitError(key: string, mode: string, other: string): LockConfigError {
    return new LockConfigError('limit', `a semaphore "${key}" with limit ${mode.slice(1)} was asked for while a permit of it with limit ${other} is held or queued; every permit of a name must give the same limit.`);
  }

  /** Every call bounded by serverTimeoutMs, as the write path's (RedisConnections). */
  private run<Reply>(script: RedisScript<Reply>, verb: string, key: string, args: readonly (string | number)[]): Promise<Reply> {
    return this.host.connections.runScript(script, lockKeys(key).all, args, verb, key);
  }
}
