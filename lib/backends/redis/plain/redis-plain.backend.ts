import { Logger } from '@nestjs/common';
import { randomBytes } from 'node:crypto';
import { LockBackendError } from '../../../errors';
import { DEFAULT_SERVER_TIMEOUT_MS, DEFAULT_TTL_MS } from '../../../lock-defaults';
import { LocalQueueBackend } from '../../../queue/local-queue-backend';
import type { BackendSettings } from '../../backend-definition';
import type { AcquireRequest, EntryMode, LockBackend, LockGrant, LockInspection } from '../../lock-backend.interface';
import { RedisBatch } from '../redis-batch';
import { BatchLeases, isLate } from '../redis-batch-leases';
import { RedisConnections } from '../redis-connection';
import { describedInspection, describeHolders, RedisHolderRecords } from '../redis-holder-records';
import { validateRedisOptions, type RedisBackendOptions } from '../redis-options';
import type { RedisScript } from '../redis-script';
import { forceReleasePlainLock, inspectPlainLock } from './redis-plain-inspect';
import { plainLockKeys, type PlainLockKeys } from './redis-plain-keys';
import { plainAcquireScript, plainCancelScript, plainReleaseScript, plainRenewScript, RELEASE_CHANNEL, type PlainAcquireReply } from './redis-plain-scripts';
import { PlainWaits, RETRY_CAP_MS } from './redis-plain-waits';

/** As the native driver: a holder hands over at once only with this much of its lease known left. */
const MIN_HANDOVER_VALIDITY_MS = 50;
const KEY_CACHE_SIZE = 10_000;
const logger = new Logger('DistributedLock');

let trySeq = 0;

/**
 * Redis with `protocol: 'plain'`: the lock is the key itself, taken with `SET key value NX PX`
 * and released by compare-and-delete, so plain clients of other languages share it. Redis keeps
 * no queue: a process's callers of one name still share one grant per batch (LocalQueues), and
 * a batch that finds the key held tries again when PlainWaits says. See docs/redis.md, "Protocol: plain".
 */
export class RedisPlainLockBackend extends LocalQueueBackend<RedisBatch> implements LockBackend {
  readonly name = 'redis';
  /** The key must be the very name other clients use: hashing a long one would part it from theirs, so only Redis' own limit applies. */
  readonly maxKeyBytes = 512 * 1024 * 1024;
  /** A plain lock is exclusive only: read locks and semaphores need the native queue. */
  readonly modes = ['write'] as const;

  /** Plain clients know no modes: the refusal names the protocol that has them. */
  modeRefusal(mode: EntryMode): string {
    const what = mode === 'read' ? "mode: 'read'" : 'semaphores';
    return `backend.protocol 'plain' does not offer ${what} (the plain lock of other clients knows no modes): use protocol 'native' (the default) for them, or another backend: memory, redis, etcd, zookeeper or postgres.`;
  }
  /** Other clients' plain locks write no delay key and look for none: a delay would hold only among ours. */
  lockDelayRefusal(): string {
    return "backend.protocol 'plain' cannot enforce lockDelayMs (the plain lock of other clients neither writes nor honours a delay): use protocol 'native' (the default), or leave lockDelayMs at 0.";
  }
  readonly address: string;
  readonly boundedRelease = true;
  /** 96 random bits: with a batch id it makes each owner id unique across processes. */
  private readonly clientId = randomBytes(12).toString('base64url');
  /** Batches that found the key held, by key, oldest first: they try again together. */
  private readonly waiters = new Map<string, Set<RedisBatch>>();
  /** Batches with an acquire at the server whose reply has not come. */
  private readonly trying = new Set<RedisBatch>();
  private readonly waits: PlainWaits;
  private readonly leases = new BatchLeases({
    renew: (batch, ttlMs) => this.renewValue(batch.key, batch.ownerValue, ttlMs, 'hand over'),
    holderTtl: (batch) => (batch.holder === undefined ? undefined : this.held.get(batch.holder)?.ttlMs),
  });
  private readonly closing = new AbortController();
  private readonly closingWork: Promise<unknown>[] = [];
  private readonly keyCache = new Map<string, PlainLockKeys>();
  private readonly connections: RedisConnections;
  /** A waiter entry not refreshed by a try for this long is gone (its process died): tries come RETRY_CAP_MS apart at most. */
  private readonly staleAfterMs: number;
  /** This process's holder description at Redis, for inspect(); none without a holderDescription. */
  private readonly records?: RedisHolderRecords;
  /** Where the holder descriptions are kept (holderRecordKey). */
  private readonly keyPrefix?: string;

  /** Validates and starts connecting in the background, as the native driver. */
  constructor(options: RedisBackendOptions, settings: BackendSettings) {
    super('redis', { sendSoon: (send) => process.nextTick(send), sendFirstAtOnce: true, signalOnlyWhenWaiting: true });
    validateRedisOptions(options);
    this.connections = new RedisConnections(options, settings, RELEASE_CHANNEL, () => this.waits.wakeAll());
    this.address = this.connections.address;
    this.staleAfterMs = 4 * RETRY_CAP_MS + this.connections.serverTimeoutMs;
    this.waits = new PlainWaits(this.connections.client, this.connections.subscriber as ConstructorParameters<typeof PlainWaits>[1], (key) => this.tryAgain(key));
    this.connections.subscriber.on('ready', () => void this.waits.detectKeyspaceEvents());
    this.keyPrefix = settings.keyPrefix;
    if (settings.holderDescription !== undefined) this.records = new RedisHolderRecords([this.connections], settings.keyPrefix, this.clientId, settings.holderDescription);
  }

  unreachable(): Error | undefined {
    return this.connections.unreachable();
  }

  /** The key's holder; one of ours with its process's description (redis-holder-records.ts), a plain client's with none. */
  async inspect(key: string): Promise<LockInspection> {
    return describedInspection(await inspectPlainLock(this.connections, this.keysOf(key)), (holders) => describeHolders(this.connections, this.keyPrefix, holders));
  }

  forceRelease(key: string): Promise<boolean> {
    return forceReleasePlainLock(this.connections, this.keysOf(key));
  }

  async ping(): Promise<void> {
    this.lifecycle.assertOpen();
    await this.connections.ping();
  }

  /** One SET NX, never queued; its value names this process's client id as a batch's does, so inspect finds its description. */
  protected async tryTake(request: Omit<AcquireRequest, 'signal'>): Promise<LockGrant | null> {
    const { key } = request;
    const owner = `${this.clientId}~t${(trySeq++).toString(36)}`;
    const ttl = Math.ceil(request.ttlMs);
    const sentAt = performance.now();
    let reply: PlainAcquireReply;
    let requestedAt: number | undefined = sentAt;
    try {
      reply = await this.run(plainAcquireScript, 'try to acquire', key, [owner, ttl]);
      if (typeof reply === 'number' && isLate(sentAt, ttl)) requestedAt = await this.confirmGrant(key, reply, owner, ttl);
    } catch (error) {
      // The script may still run (a paused server wakes up): the cancel, sent after it, gives back what it took.
      void this.cancel(key, owner, true);
      throw error;
    }
    if (typeof reply !== 'number' || requestedAt === undefined) return null;
    const batch = new RedisBatch(key, owner, owner);
    batch.lease = { from: requestedAt, ttlMs: ttl };
    this.queues.adopt(batch, BigInt(reply), request);
    return this.grant(batch, request);
  }

  async renew(grant: LockGrant, ttlMs: number): Promise<boolean> {
    const held = this.heldFor(grant);
    if (!held || !this.lifecycle.isOpen) return false;
    held.ttlMs = Math.ceil(ttlMs);
    return (await this.renewValue(held.batch.key, held.batch.ownerValue, held.ttlMs, 'renew')) === 1;
  }

  override release(grant: LockGrant, validForMs?: number): Promise<void> {
    if (this.connections.closed) return Promise.resolve();
    return super.release(grant, validForMs !== undefined && validForMs >= MIN_HANDOVER_VALIDITY_MS ? validForMs : undefined);
  }

  async close(): Promise<void> {
    if (!this.lifecycle.beginClose()) return;
    const holding = [...this.queues.batches()].filter((batch) => batch.state === 'holding');
    this.queues.closeAll(this.lifecycle.closedWhileWaiting());
    this.waits.clear();
    this.closing.abort(this.lifecycle.closedWhileHeld());
    this.held.clear();
    const pending = [...this.closingWork, ...holding.map((batch) => this.releaseBatch(batch).catch(() => undefined)), this.records?.remove()];
    if (this.connections.unreachable() === undefined) {
      await Promise.race([Promise.all(pending), new Promise((resolve) => setTimeout(resolve, Math.min(2_000, this.connections.serverTimeoutMs)).unref())]);
    }
    this.connections.close();
  }

  /** BatchEntries: one SET NX with the batch's first caller's ttl; held by someone else, the batch waits (PlainWaits). */
  send(batch: RedisBatch): void {
    batch.ttlMs = Math.ceil(batch.peek()!.request.ttlMs);
    this.sendAcquire(batch);
  }

  /** BatchEntries: forgets the batch; a SET NX still at the server is given back by the cancel sent after it. */
  withdraw(batch: RedisBatch, reason: unknown): void {
    this.forget(batch);
    const cancelled = this.cancel(batch.key, batch.owner, !this.lifecycle.isOpen);
    if (!this.lifecycle.isOpen) this.closingWork.push(cancelled);
    this.queues.end(batch, reason);
  }

  /** BatchEntries: compare-and-delete, announced to this library's waiters. */
  remove(batch: RedisBatch): Promise<void> {
    this.forget(batch);
    return this.releaseBatch(batch);
  }

  /** BatchEntries: the previous holder's lease is not known valid: renew the key for the next caller first. */
  async confirm(batch: RedisBatch): Promise<true | Error> {
    const ttlMs = Math.ceil(batch.peek()?.request.ttlMs ?? batch.ttlMs);
    const sentAt = performance.now();
    let renewed: 0 | 1;
    try {
      renewed = await this.renewValue(batch.key, batch.ownerValue, ttlMs, 'hand on');
    } catch (error) {
      void this.remove(batch).catch(() => undefined);
      return error as Error;
    }
    if (renewed !== 1) {
      this.forget(batch);
      return new LockBackendError('redis', `hand on "${batch.key}"`, new Error('the lock key no longer holds our value: its lease ran out, or the key was deleted'), this.address);
    }
    batch.lease = { from: sentAt, ttlMs };
    return true;
  }

  usable(): boolean {
    return true;
  }

  grant(batch: RedisBatch, { key, owner, ttlMs }: Pick<AcquireRequest, 'key' | 'owner' | 'ttlMs'>, handedOverForMs?: number): LockGrant {
    const ttl = Math.ceil(ttlMs);
    const grant = this.leases.next(batch, ttl, handedOverForMs, { key, owner, fencingToken: batch.token(), lost: this.closing.signal });
    this.held.set(owner, { grant, batch, ttlMs: ttl });
    return grant;
  }

  protected newBatch(name: string, id: string): RedisBatch {
    return new RedisBatch(name, id, this.clientId + id);
  }

  private sendAcquire(batch: RedisBatch): void {
    const sentAt = performance.now();
    this.trying.add(batch);
    this.run(plainAcquireScript, 'acquire', batch.key, [batch.owner, batch.ttlMs, this.staleAfterMs]).then(
      (reply) => this.onReply(batch, reply, sentAt),
      (error) => this.acquireFailed(batch, error),
    );
  }

  private onReply(batch: RedisBatch, reply: PlainAcquireReply, sentAt: number): void {
    this.trying.delete(batch);
    // Withdrawn meanwhile: its cancel, sent after this acquire, gave back what it took.
    if (!this.isWaiting(batch)) return;
    if (typeof reply === 'number') {
      this.unwait(batch);
      if (isLate(sentAt, batch.ttlMs)) this.grantLate(batch, reply);
      else this.granted(batch, reply, sentAt);
    } else {
      this.wait(batch);
      this.waits.schedule(batch.key, reply[0]);
    }
    this.queues.sent(batch, typeof reply !== 'number');
  }

  private granted(batch: RedisBatch, fence: number, requestedAt: number): void {
    batch.lease = { from: requestedAt, ttlMs: batch.ttlMs };
    this.queues.holds(batch, BigInt(fence));
  }

  /** The reply came so late (a paused process) that the lease may be nearly over: renewed first, or tried again. */
  private grantLate(batch: RedisBatch, fence: number): void {
    this.trying.add(batch);
    this.confirmGrant(batch.key, fence, batch.owner, batch.ttlMs).then(
      (confirmedAt) => {
        this.trying.delete(batch);
        if (!this.isWaiting(batch)) return;
        if (confirmedAt !== undefined) return this.granted(batch, fence, confirmedAt);
        this.wait(batch);
        this.waits.schedule(batch.key, -2);
      },
      (error) => this.acquireFailed(batch, error),
    );
  }

  /** An owner-checked renewal of a grant whose reply came late: when it was sent (the lease counts from then), or undefined when the key is no longer ours. */
  private async confirmGrant(key: string, fence: number, owner: string, ttlMs: number): Promise<number | undefined> {
    const sentAt = performance.now();
    return (await this.renewValue(key, `${fence} ${owner}`, ttlMs, 'confirm a late grant of')) === 1 ? sentAt : undefined;
  }

  /** The key's waiting batches try again, oldest first, each with no try already out. */
  private tryAgain(key: string): void {
    const batches = this.waiters.get(key);
    if (!batches || !this.lifecycle.isOpen) return;
    for (const batch of batches) if (!this.trying.has(batch)) this.sendAcquire(batch);
  }

  /** The acquire went unanswered or failed: the batch's callers are told, and whatever it may still take is given back. */
  private acquireFailed(batch: RedisBatch, error: unknown): void {
    this.trying.delete(batch);
    if (!this.isWaiting(batch)) return;
    this.forget(batch);
    this.queues.end(batch, error);
    void this.cancel(batch.key, batch.owner, true);
  }

  private wait(batch: RedisBatch): void {
    let batches = this.waiters.get(batch.key);
    if (!batches) this.waiters.set(batch.key, (batches = new Set()));
    batches.add(batch);
  }

  private unwait(batch: RedisBatch): void {
    const batches = this.waiters.get(batch.key);
    if (!batches?.delete(batch) || batches.size > 0) return;
    this.waiters.delete(batch.key);
    this.waits.remove(batch.key);
  }

  private forget(batch: RedisBatch): void {
    this.trying.delete(batch);
    this.unwait(batch);
  }

  private isWaiting(batch: RedisBatch): boolean {
    return batch.state === 'sending' || batch.state === 'queued';
  }

  private releaseBatch(batch: RedisBatch): Promise<void> {
    return this.run(plainReleaseScript, 'release', batch.key, [batch.ownerValue, RELEASE_CHANNEL, batch.key]) as Promise<unknown> as Promise<void>;
  }

  private renewValue(key: string, value: string, ttlMs: number, verb: string): Promise<0 | 1> {
    return this.run(plainRenewScript, verb, key, [value, ttlMs]);
  }

  /** Gives back a grant an acquire of `owner` may have taken; `quiet` after a failure, when the server may well be down. */
  private cancel(key: string, owner: string, quiet: boolean): Promise<unknown> {
    return this.run(plainCancelScript, 'give back', key, [owner, RELEASE_CHANNEL, key]).catch((error) => {
      if (!quiet) logger.warn(`Giving back "${key}" failed; it expires with its lease: ${error.message}`);
    });
  }

  private run<Reply>(script: RedisScript<Reply>, verb: string, key: string, args: readonly (string | number)[]): Promise<Reply> {
    return this.connections.runScript(script, this.keysOf(key).all, args, verb, key);
  }

  private keysOf(key: string): PlainLockKeys {
    let keys = this.keyCache.get(key);
    if (!keys) {
      if (this.keyCache.size >= KEY_CACHE_SIZE) this.keyCache.clear();
      this.keyCache.set(key, (keys = plainLockKeys(key)));
    }
    return keys;
  }
}

/** Builds the backend for `{ type: 'redis', protocol: 'plain', ... }`; resolves at once, the connections open in the background. */
export async function createRedisPlainBackend(
  options: RedisBackendOptions,
  settings: BackendSettings = { ttlMs: DEFAULT_TTL_MS, serverTimeoutMs: DEFAULT_SERVER_TIMEOUT_MS },
): Promise<RedisPlainLockBackend> {
  return new RedisPlainLockBackend(options, settings);
}
