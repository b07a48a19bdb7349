import { Logger } from '@nestjs/common';
import { randomBytes } from 'node:crypto';
import { LockBackendError } from '../../errors';
import { exclusiveLockDelayOnly } from '../lock-delay-refusals';
import { DEFAULT_SERVER_TIMEOUT_MS, DEFAULT_TTL_MS } from '../../lock-defaults';
import type { BackendSettings } from '../backend-definition';
import type { AcquireRequest, EntryMode, LockBackend, LockGrant, LockInspection } from '../lock-backend.interface';
import { LocalQueueBackend } from '../../queue/local-queue-backend';
import { RedisBatch } from './redis-batch';
import { BatchLeases, isLate } from './redis-batch-leases';
import { RedisConnections } from './redis-connection';
import { parseGrantMessage } from './redis-grant-message';
import { GRANT_CHANNEL_PREFIX, type AcquireReply, type QueuedReply } from './redis-lock-scripts';
import { limitRefused, scriptMode, type ModeAcquireReply } from './redis-mode-scripts';
import { validateRedisOptions, type RedisBackendOptions } from './redis-options';
import { ownerValue, RedisCommands } from './redis-commands';
import { KeyWatches, type KeyWatch } from './redis-key-watches';
import { forceReleaseRedisLock, inspectRedisLock } from './redis-inspect';
import { ReconnectCheck } from './reconnect-check';
import { ReleaseRetries } from './release-retries';
import { ServerLife } from './server-life';
import { lifeReply, type LifeReply } from './server-life-scripts';
import { describedInspection, describeHolders, RedisHolderRecords } from './redis-holder-records';

/**
 * A holder hands the lock to the next caller of its batch at once only when its lease is known
 * valid at least this much longer: the caller runs under that lease until Redis has the renewal
 * for it (one round trip later). A lease about to end is confirmed with Redis first.
 */
const MIN_HANDOVER_VALIDITY_MS = 50;
const logger = new Logger('DistributedLock');

let trySeq = 0;

/**
 * Redis (single node, Sentinel or Cluster): a FIFO queue per lock name with direct handoff.
 * A process's callers of one name queue behind one entry per batch (LocalQueues) and take turns
 * while it holds (readers all at once); the release script makes the next entry the owner and
 * publishes the grant on that entry's process channel, so an entry owns the lock when the message
 * arrives. Read and permit entries run the scripts of redis-mode-scripts.ts. See docs/redis.md.
 */
export class RedisLockBackend extends LocalQueueBackend<RedisBatch> implements LockBackend {
  readonly name = 'redis';
  /** Names are percent-encoded into the hash tag (up to 3x); Redis takes far longer keys. */
  readonly maxKeyBytes = 1024;
  /**
   * In the name's one queue: readers of one process share an entry and are served together; each
   * permit caller has an entry of its own (a place of the semaphore).
   */
  readonly modes = ['write', 'read', 'permit'] as const;
  readonly address: string;
  /** Enforced by the scripts with a delay key beside the owner key (redis-delay-lua.ts), for the exclusive lock. */
  readonly lockDelay = true;
  lockDelayRefusal(mode: EntryMode): string | undefined {
    return exclusiveLockDelayOnly('redis', mode);
  }
  /** Every command is bounded by serverTimeoutMs (RedisConnections), the release script's too. */
  readonly boundedRelease = true;
  /** 96 random bits, short: it names the grant channel and every entry of this process. */
  private readonly clientId = randomBytes(12).toString('base64url');
  private readonly channel = GRANT_CHANNEL_PREFIX + this.clientId;
  /** Batches whose entry is at the server (sent, queued or holding), by the entry's owner id. */
  private readonly entries = new Map<string, RedisBatch>();
  private readonly watches = new KeyWatches<RedisBatch>((key, watch) => this.check(key, watch));
  private readonly leases = new BatchLeases({
    renew: (batch, ttlMs) => this.renewEntry(batch, ttlMs, 'hand over'),
    holderTtl: (batch) => this.entryTtl(batch),
  });
  /** Cancels sent by close(), which waits for them briefly. */
  private readonly closingWork: Promise<unknown>[] = [];
  /**
   * Redis cannot tell us a lease is gone without being asked (renewal asks), so the only loss the
   * backend reports itself is its own closing: one signal shared by every grant, fired by close().
   */
  private readonly closing = new AbortController();
  private readonly connections: RedisConnections;
  private readonly commands: RedisCommands;
  /** Finds a restart that lost the data, and keeps the server from granting until old leases ended. */
  private readonly life: ServerLife;
  /** This process's holder description at Redis, for inspect(); none without a holderDescription. */
  private readonly records?: RedisHolderRecords;
  /** Where the holder descriptions are kept (holderRecordKey). */
  private readonly keyPrefix?: string;
  /** Releases lost with the connection, sent again once it is back. */
  private readonly releaseRetries = new ReleaseRetries((key, value, write) => this.releaseValue(key, value, write, true));
  private readonly sendReleasesAgain = (): void => this.releaseRetries.reconnected();
  /** The check of each reconnection that scripts which may grant wait for; none on a Cluster. */
  private readonly reconnects?: ReconnectCheck;

  /**
   * Validates and starts connecting in the background: never waits for the server (see
   * docs/redis.md, "When the server is down"). Use createRedisBackend().
   */
  constructor(options: RedisBackendOptions, settings: BackendSettings) {
    super('redis', {
      // The callers of one tick share an entry; an uncontended acquisition waits for no loop turn.
      sendSoon: (send) => process.nextTick(send),
      sendFirstAtOnce: true,
      signalOnlyWhenWaiting: true,
    });
    validateRedisOptions(options);
    this.connections = new RedisConnections(options, settings, this.channel, () => {
      // Grants published while the subscriber was reconnecting are lost: check every waiting key
      // now (after ReconnectCheck, like every script that may grant).
      for (const key of this.watches.keys()) this.watches.schedule(key, -1, 0);
    });
    this.life = new ServerLife(this.connections, settings.ttlMs, options.restartProtection !== false, 'redis');
    // A Cluster's scripts carry no life marker (see LIFE_KEY): nothing to check there.
    const cluster = (this.connections.client as { isCluster?: boolean }).isCluster === true;
    this.reconnects = cluster ? undefined : new ReconnectCheck(this.connections, this.life);
    this.commands = new RedisCommands(this.connections, this.clientId, () => this.reconnects?.before());
    this.connections.client.on('ready', this.sendReleasesAgain);
    this.address = this.connections.address;
    this.keyPrefix = settings.keyPrefix;
    if (settings.holderDescription !== undefined) this.records = new RedisHolderRecords([this.connections], settings.keyPrefix, this.clientId, settings.holderDescription);
    this.listen();
  }

  unreachable(): Error | undefined {
    return this.connections.unreachable();
  }

  /** Asks Redis, never this process's queues: see redis-inspect.ts; then the holders' descriptions (redis-holder-records.ts). */
  async inspect(key: string): Promise<LockInspection> {
    return describedInspection(await inspectRedisLock(this.connections, key), (holders) => describeHolders(this.connections, this.keyPrefix, holders));
  }

  forceRelease(key: string): Promise<boolean> {
    return forceReleaseRedisLock(this.connections, key);
  }

  /** PING on the command connection, bounded by serverTimeoutMs like every command (RedisConnections.send). */
  async ping(): Promise<void> {
    this.lifecycle.assertOpen();
    await this.connections.ping();
  }

  /**
   * The acquire script of the request's mode without queueing. The try's entry is named as a
   * batch's, after this process's client id, so inspect finds its holder description.
   */
  protected async tryTake(request: Omit<AcquireRequest, 'signal'>, afterLife = false): Promise<LockGrant | null> {
    const { key, ttlMs } = request;
    const owner = `${this.clientId}~t${(trySeq++).toString(36)}`;
    const write = (request.mode ?? 'write') === 'write';
    const sentAt = performance.now();
    const ttl = Math.ceil(ttlMs);
    this.life.asked(ttl);
    let reply: AcquireReply | ModeAcquireReply;
    let requestedAt: number | undefined;
    try {
      reply = write ? await this.commands.tryAcquire(key, owner, ttl, request.lockDelayMs) : await this.commands.acquireMode(key, owner, ttl, scriptMode(request));
      const life = lifeReply(reply);
      // A first boot's marker written, the try goes again (once); a quarantined server grants nothing.
      if (life) return (await this.life.after(life)) === 0 && !afterLife ? this.tryTake(request, true) : null;
      this.life.answered();
      // The reply came so late (a paused process) that the lease may be nearly over: ask first.
      if (typeof reply === 'number') requestedAt = isLate(sentAt, ttl) ? await this.confirmGrant(key, owner, reply, ttl, write, request.lockDelayMs ?? 0) : sentAt;
    } catch (error) {
      // The script may still run (a paused server wakes up): the cancel, sent after it, gives back what it took.
      void this.cancelEntry(key, owner, write, true);
      throw error;
    }
    if (typeof reply !== 'number') {
      if (reply[0] === -1) throw limitRefused(key, request.limit, reply[1]);
      return null;
    }
    if (requestedAt === undefined) return null;
    const batch = new RedisBatch(key, owner, owner);
    batch.lease = { from: requestedAt, ttlMs: ttl };
    this.entries.set(owner, batch);
    // Callers that queued meanwhile put their entry after this one: they wait for it.
    this.queues.adopt(batch, BigInt(reply), request);
    return this.grant(batch, request);
  }

  /**
   * Renews the batch's entry, checked against the entry's owner value: to this holder's ttl, or
   * under a read entry to the longest ttl among its readers (entryTtl).
   */
  async renew(grant: LockGrant, ttlMs: number): Promise<boolean> {
    const held = this.heldFor(grant);
    if (!held || !this.lifecycle.isOpen) return false;
    held.ttlMs = Math.ceil(ttlMs);
    this.life.asked(held.ttlMs);
    const batch = held.batch;
    return (await this.renewEntry(batch, batch.mode === 'read' ? this.entryTtl(batch)! : held.ttlMs, 'renew')) === 1;
  }

  /**
   * A lease handed over with less than MIN_HANDOVER_VALIDITY_MS left is confirmed with Redis
   * first. None after close(): it released what was held, and the connections are gone.
   */
  override release(grant: LockGrant, validForMs?: number): Promise<void> {
    if (this.connections.closed) return Promise.resolve();
    return super.release(grant, validForMs !== undefined && validForMs >= MIN_HANDOVER_VALIDITY_MS ? validForMs : undefined);
  }

  async close(): Promise<void> {
    if (!this.lifecycle.beginClose()) return;
    const holding = [...this.queues.batches()].filter((batch) => batch.state === 'holding');
    // Entries still queued are cancelled (withdraw), the callers of every batch told.
    this.queues.closeAll(this.lifecycle.closedWhileWaiting());
    this.watches.clear();
    this.closing.abort(this.lifecycle.closedWhileHeld());
    this.held.clear();
    this.entries.clear();
    this.releaseRetries.clear();
    this.connections.client.removeListener('ready', this.sendReleasesAgain);
    this.reconnects?.close();
    const pending = [...this.closingWork, ...holding.map((batch) => this.releaseEntry(batch).catch(() => undefined)), this.records?.remove()];
    // Best effort, and never long: with the server unreachable, leases, queue entries and the holder record expire on their own.
    if (this.connections.unreachable() === undefined) {
      await Promise.race([Promise.all(pending), new Promise((resolve) => setTimeout(resolve, Math.min(2_000, this.connections.serverTimeoutMs)).unref())]);
    }
    this.connections.close();
  }

  /** BatchEntries: the acquire script of the batch's mode for its entry, with its first caller's ttl. */
  send(batch: RedisBatch): void {
    batch.ttlMs = Math.ceil(batch.peek()!.request.ttlMs);
    this.life.asked(batch.ttlMs);
    batch.askedAt = performance.now();
    this.entries.set(batch.owner, batch);
    this.sendAcquire(batch, batch.askedAt);
  }

  /** BatchEntries: the cancel, sent after the acquire on the same connection, takes back what it took. */
  withdraw(batch: RedisBatch, reason: unknown): void {
    this.forget(batch);
    const cancelled = this.cancelEntry(batch.key, batch.owner, batch.mode === 'write', !this.lifecycle.isOpen);
    if (!this.lifecycle.isOpen) this.closingWork.push(cancelled);
    this.queues.end(batch, reason);
  }

  /** BatchEntries: the release script hands the lock to the next entry, of whichever process. */
  remove(batch: RedisBatch): Promise<void> {
    this.forget(batch);
    return this.releaseEntry(batch);
  }

  /** BatchEntries: the previous holder's lease is not known valid: renew the entry for the next caller first. */
  async confirm(batch: RedisBatch): Promise<true | Error> {
    const ttlMs = Math.ceil(batch.peek()?.request.ttlMs ?? batch.ttlMs);
    const sentAt = performance.now();
    let renewed: 0 | 1;
    try {
      renewed = await this.renewEntry(batch, ttlMs, 'hand on');
    } catch (error) {
      void this.remove(batch).catch(() => undefined);
      return error as Error;
    }
    if (renewed !== 1) {
      this.forget(batch);
      return new LockBackendError('redis', `hand on "${batch.key}"`, new Error('the queue entry no longer holds the lock: its lease ran out, or the key was deleted'), this.address);
    }
    batch.lease = { from: sentAt, ttlMs };
    return true;
  }

  /** BatchEntries: an entry needs no session; renewals find out when it is gone. */
  usable(): boolean {
    return true;
  }

  /** BatchEntries: the grant of a caller served under the batch's entry; its lease is BatchLeases'. */
  grant(batch: RedisBatch, { key, owner, ttlMs }: Pick<AcquireRequest, 'key' | 'owner' | 'ttlMs'>, handedOverForMs?: number): LockGrant {
    const ttl = Math.ceil(ttlMs);
    const grant = this.leases.next(batch, ttl, handedOverForMs, { key, owner, fencingToken: batch.token(), lost: this.closing.signal });
    this.held.set(owner, { grant, batch, ttlMs: ttl });
    return grant;
  }

  /** Its entry's owner id names this process and the batch. */
  protected newBatch(name: string, id: string): RedisBatch {
    return new RedisBatch(name, id, this.clientId + id);
  }

  /**
   * The release script of the entry's mode; one that could not reach the server is sent again
   * once the connection is back (ReleaseRetries), while the entry's lease may still be there.
   */
  private releaseEntry(batch: RedisBatch): Promise<void> {
    const { key, ownerValue } = batch;
    const write = batch.mode === 'write';
    return this.releaseValue(key, ownerValue, write, batch.lockDelayMs > 0, !batch.queued).catch((error) => {
      if (this.lifecycle.isOpen) this.releaseRetries.failed(key, ownerValue, write, performance.now() + this.life.longestTtlMs, error);
      throw error;
    });
  }

  /**
   * `mayHaveDelay`: the entry asked for a lock-delay (a retry says true: the script deletes only a
   * delay key of a lock still ours). `grantedAtOnce`: see RedisCommands.release.
   */
  private releaseValue(key: string, value: string, write: boolean, mayHaveDelay: boolean, grantedAtOnce = false): Promise<void> {
    return write ? this.commands.release(key, value, mayHaveDelay, grantedAtOnce) : this.commands.releaseMode(key, value);
  }

  /** The cancel script of the entry's mode; `quiet` after a failure, when the server may well be down. */
  private cancelEntry(key: string, owner: string, write: boolean, quiet: boolean): Promise<unknown> {
    return write ? this.commands.cancel(key, owner, quiet) : this.commands.cancelMode(key, owner, quiet);
  }

  /** The renew script of the entry's mode: 1 renewed, 0 no longer ours. */
  private renewEntry(batch: RedisBatch, ttlMs: number, verb: string): Promise<0 | 1> {
    return batch.mode === 'write' ? this.commands.renew(batch.key, batch.ownerValue, ttlMs, verb, batch.lockDelayMs) : this.commands.renewMode(batch.key, batch.ownerValue, ttlMs, verb);
  }

  /**
   * The ttl the entry's lease must have for whoever holds under it now: the holder's, and under
   * a read entry the longest among its readers, so that renewing it for one reader never
   * shortens the lease another relies on.
   */
  private entryTtl(batch: RedisBatch): number | undefined {
    let ttlMs: number | undefined;
    for (const owner of batch.holders) {
      const holderTtl = this.held.get(owner)?.ttlMs;
      if (holderTtl !== undefined && (ttlMs === undefined || holderTtl > ttlMs)) ttlMs = holderTtl;
    }
    return ttlMs;
  }

  private sendAcquire(batch: RedisBatch, sentAt = performance.now()): void {
    const staleAfterMs = this.watches.staleAfter(batch.key, batch.ttlMs);
    // Not waited for: only an entry that queues needs the grant channel (onQueued).
    const subscription = this.connections.subscriptions;
    if (batch.mode !== 'write') {
      this.commands.acquireMode(batch.key, batch.owner, batch.ttlMs, batch.scriptMode, staleAfterMs).then(
        (reply) => this.onQueued(batch, reply, sentAt, subscription),
        (error) => this.acquireFailed(batch, error),
      );
      return;
    }
    const waiting = () => this.isWaiting(batch);
    this.commands.acquire(batch.key, batch.owner, batch.ttlMs, batch.lockDelayMs, staleAfterMs, waiting, (error, reply) => {
      if (error) this.acquireFailed(batch, error);
      else this.onQueued(batch, reply!, sentAt, subscription);
    });
  }

  /**
   * The acquire script's answer for the batch's entry: granted, queued behind someone, or (a permit)
   * refused for its limit. `subscription`: the grant channel's subscription count when it was sent.
   */
  private onQueued(batch: RedisBatch, reply: AcquireReply | ModeAcquireReply, sentAt: number, subscription: number): void {
    batch.answered = true;
    // Not subscribed then, or subscribed again since: a grant may have been published unheard.
    const unheard = subscription === 0 || subscription !== this.connections.subscriptions;
    const life = lifeReply(reply);
    if (life) return this.waitOutLife(batch, life, unheard);
    this.life.answered();
    const granted = typeof reply === 'number';
    batch.queued = !granted;
    // Else withdrawn (its cancel, sent after, hands a grant on), or granted by a message that came first.
    if (this.isWaiting(batch)) {
      if (granted) {
        this.grantFrom(batch, reply, sentAt);
      } else if (reply[0] === -1) {
        this.forget(batch);
        this.queues.end(batch, limitRefused(batch.key, batch.limit, reply[1]));
      } else {
        const [, ownerPttlMs, , serverMs] = reply as QueuedReply;
        this.watches.add(batch).clock.sample(serverMs, sentAt);
        this.watches.schedule(batch.key, ownerPttlMs);
        if (unheard) this.checkOnceSubscribed(batch);
      }
    }
    this.queues.sent(batch, !granted);
  }

  /**
   * The entry queued before the grant channel was subscribed (or subscribed again after a
   * reconnection, before this entry was among the keys checked then): a grant published before
   * then went unheard, so the key is checked as soon as the channel is (the check finds grants). A
   * channel still not subscribed after serverTimeoutMs fails the entry: it could not hear of its grant.
   */
  private checkOnceSubscribed(batch: RedisBatch): void {
    this.connections.whenSubscribed(`acquire "${batch.key}"`).then(
      () => {
        if (this.isWaiting(batch)) this.watches.schedule(batch.key, -1, 0);
      },
      (error: unknown) => this.acquireFailed(batch, error),
    );
  }

  /**
   * The server granted nothing for its life check: the entry waits as one whose queue vanished,
   * and the safety check puts it in the queue (or grants it) once the marker is written or the
   * quarantine is over. Meanwhile the check comes at its usual period, not only at the end: it
   * keeps this process's waiters alive and finds a grant a release handed over.
   */
  private waitOutLife(batch: RedisBatch, reply: LifeReply, unheard: boolean): void {
    if (this.isWaiting(batch)) {
      this.watches.add(batch);
      void this.life.after(reply).then(
        (waitMs) => this.watches.schedule(batch.key, waitMs),
        () => this.watches.schedule(batch.key, -1),
      );
      if (unheard) this.checkOnceSubscribed(batch);
    }
    this.queues.sent(batch, true);
  }

  /**
   * The acquire script failed or went unanswered. It may still run at the server (a paused
   * server wakes up): a cancel sent after it on the same connection takes that grant or queue
   * entry back.
   */
  private acquireFailed(batch: RedisBatch, error: unknown): void {
    if (!this.isWaiting(batch)) return;
    this.forget(batch);
    this.queues.end(batch, error);
    void this.cancelEntry(batch.key, batch.owner, batch.mode === 'write', true);
  }

  private listen(): void {
    this.connections.subscriber.on('message', (channel: string, message: string) => {
      if (channel !== this.channel) return;
      // Anything else published on our channel is not ours to act on, and must not throw in ioredis' emitter.
      const grant = parseGrantMessage(message);
      if (grant) this.grantLate(grant.key, grant.owner, grant.fence, grant.serverMs);
    });
  }

  /**
   * A grant that came by a message or a safety check: the lease began at the server before we
   * heard of it, when the server's clock read `serverMs` (undefined: not known), and runs for the
   * entry's ttl from then. It counts from the latest local moment known to precede that (the
   * entry's own request, or `serverMs` mapped through the key's ServerClock); when that leaves
   * too little of the lease (isLate), the grant is confirmed with the server first.
   */
  private grantLate(key: string, owner: string, fence: string, serverMs: number | undefined): void {
    const batch = this.entries.get(owner);
    if (batch?.state === 'holding') return; // the same grant seen twice (message and safety check)
    if (!batch || !this.isWaiting(batch)) return this.handOn(key, owner, fence);
    const clock = this.watches.get(key)?.clock;
    this.grantFrom(batch, fence, Math.max(batch.askedAt, serverMs === undefined || !clock ? -Infinity : clock.earliestLocal(serverMs)));
  }

  /** The entry's grant, its lease counted from `requestedAt`; confirmed with the server first when that leaves too little. */
  private grantFrom(batch: RedisBatch, fence: string | number, requestedAt: number): void {
    if (batch.confirming) return;
    if (!isLate(requestedAt, batch.ttlMs)) return this.granted(batch, fence, requestedAt);
    batch.confirming = true;
    void this.confirmGrant(batch.key, batch.owner, fence, batch.ttlMs, batch.mode === 'write', batch.lockDelayMs).then(
      (confirmedAt) => {
        batch.confirming = false;
        // Withdrawn meanwhile: its cancel, sent after the renewal, hands the lock on.
        if (!this.isWaiting(batch)) return;
        if (confirmedAt !== undefined) return this.granted(batch, fence, confirmedAt);
        // The lease ran out before we heard of it. A queued entry is put back in the queue by the
        // safety check; one granted at once asks again; one whose reply is still to come is queued by it.
        if (this.watches.get(batch.key)?.waiters.has(batch.owner)) this.watches.schedule(batch.key, -1, 0);
        else if (batch.answered) this.sendAcquire(batch);
      },
      (error) => {
        batch.confirming = false;
        this.acquireFailed(batch, error);
      },
    );
  }

  /** The entry holds the lock: its first caller gets it (LocalQueues.holds, then grant). */
  private granted(batch: RedisBatch, fence: string | number, requestedAt: number): void {
    this.watches.remove(batch.key, batch.owner);
    batch.lease = { from: requestedAt, ttlMs: batch.ttlMs };
    this.queues.holds(batch, BigInt(fence));
    // The readers served at once have taken it; a later renewal, for the readers holding then, may end it sooner.
    if (batch.mode === 'read') batch.lease = undefined;
  }

  /**
   * An owner-checked renewal of a grant that came late: resolves with when it was sent (the
   * lease counts from then), or undefined when the lease is no longer ours.
   */
  private async confirmGrant(key: string, owner: string, fence: string | number, ttlMs: number, write: boolean, lockDelayMs: number): Promise<number | undefined> {
    const sentAt = performance.now();
    const value = ownerValue(fence, owner);
    const verb = 'confirm a late grant of';
    const renewed = await (write ? this.commands.renew(key, value, ttlMs, verb, lockDelayMs) : this.commands.renewMode(key, value, ttlMs, verb));
    return renewed === 1 ? sentAt : undefined;
  }

  /**
   * A grant nobody here waits for any more: handed on at once. A read or permit entry's grant
   * is given back by the cancel sent when it stopped waiting; this release then changes nothing.
   */
  private handOn(key: string, owner: string, fence: string): void {
    this.commands.release(key, ownerValue(fence, owner), true).catch((error) =>
      logger.warn(`Handing on an unwanted grant of "${key}" failed; it expires with its lease: ${error.message}`),
    );
  }

  /** The safety check of the key's waiting entries: the check script of each mode that waits. */
  private check(key: string, watch: KeyWatch<RedisBatch>): void {
    if (!this.lifecycle.isOpen) return;
    const writes: RedisBatch[] = [];
    const others: RedisBatch[] = [];
    for (const batch of watch.waiters.values()) (batch.mode === 'write' ? writes : others).push(batch);
    if (writes.length > 0) void this.checkWrites(key, watch, writes);
    if (others.length > 0) void this.checkModes(key, watch, others);
  }

  private async checkWrites(key: string, watch: KeyWatch<RedisBatch>, waiting: RedisBatch[]): Promise<void> {
    const sentAt = performance.now();
    try {
      const reply = await this.commands.check(key, this.watches.staleAfter(key, watch.shortestTtlMs), waiting);
      const life = lifeReply(reply);
      if (life) return this.watches.schedule(key, await this.life.after(life));
      const [ownerPttlMs, granted, , serverMs] = reply as Exclude<typeof reply, LifeReply>;
      watch.clock.sample(serverMs, sentAt);
      // Granted at some earlier time: the lease ends ownerPttlMs after serverMs, so it began a ttl before that.
      for (let i = 0; i < granted.length; i += 2) {
        const batch = this.entries.get(granted[i]);
        this.grantLate(key, granted[i], granted[i + 1], batch ? serverMs + ownerPttlMs - batch.ttlMs : undefined);
      }
      this.watches.schedule(key, ownerPttlMs);
    } catch (error) {
      this.checkFailed(key, error);
    }
  }

  private async checkModes(key: string, watch: KeyWatch<RedisBatch>, waiting: RedisBatch[]): Promise<void> {
    const sentAt = performance.now();
    try {
      const reply = await this.commands.checkModes(key, this.watches.staleAfter(key, watch.shortestTtlMs), waiting);
      const life = lifeReply(reply);
      if (life) return this.watches.schedule(key, await this.life.after(life));
      const [nextChangeMs, granted, , serverMs] = reply as Exclude<typeof reply, LifeReply>;
      watch.clock.sample(serverMs, sentAt);
      // {owner, fence, grantedAtMs} of each entry granted: its lease began then, by the server's clock.
      for (let i = 0; i < granted.length; i += 3) this.grantLate(key, granted[i], granted[i + 1], Number(granted[i + 2]));
      this.watches.schedule(key, nextChangeMs);
    } catch (error) {
      this.checkFailed(key, error);
    }
  }

  private checkFailed(key: string, error: unknown): void {
    logger.warn(`Checking the queue of "${key}" failed, retrying: ${(error as Error).message}`);
    this.watches.schedule(key, -1);
  }

  /** The entry is sent or queued, not granted, withdrawn or failed. */
  private isWaiting(batch: RedisBatch): boolean {
    return batch.state === 'sending' || batch.state === 'queued';
  }

  /** The batch's entry is no longer at the server as ours, or no longer waits. */
  private forget(batch: RedisBatch): void {
    if (this.entries.get(batch.owner) === batch) this.entries.delete(batch.owner);
    this.watches.remove(batch.key, batch.owner);
  }
}

/**
 * Builds the backend for `{ type: 'redis', ... }`; used by createBackend, loaded only when chosen.
 * Resolves at once: the connections open in the background.
 */
export async function createRedisBackend(options: RedisBackendOptions, settings: BackendSettings = { ttlMs: DEFAULT_TTL_MS, serverTimeoutMs: DEFAULT_SERVER_TIMEOUT_MS }): Promise<RedisLockBackend> {
  return new RedisLockBackend(options, settings);
}
