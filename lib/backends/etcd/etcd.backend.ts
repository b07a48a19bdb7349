import type { Etcd3, ITxnRequest, ITxnResponse } from 'etcd3';
import { LockBackendError, LockServerUnreachableError } from '../../errors';
import { GrantWithLoss } from '../../grant-loss';
import { LazyAbort } from '../../lazy-abort';
import { DEFAULT_KEY_PREFIX, DEFAULT_SERVER_TIMEOUT_MS, DEFAULT_TTL_MS } from '../../lock-defaults';
import type { BackendSettings } from '../backend-definition';
import type { AcquireRequest, EntryMode, LockBackend, LockGrant, LockInspection } from '../lock-backend.interface';
import { exclusiveLockDelayOnly } from '../lock-delay-refusals';
import { LocalQueueBackend } from '../../queue/local-queue-backend';
import { badLimit, decide, type EntryValue } from './entry-modes';
import { EtcdAcquisition, NOT_FREE, watchSafetyNetMs, type AcquisitionContext } from './etcd-acquisition';
import { EtcdCalls } from './etcd-calls';
import { ATTEMPTS, createEtcdClient, suppliedClientAddress } from './etcd-client';
import { EtcdInspector } from './etcd-inspect';
import { EtcdKeyDeletes, LATE_PUT_MS } from './etcd-key-deletes';
import { holderRecordKey } from './etcd-keys';
import { EtcdBatch } from './etcd-batch';
import type { LockKeys } from './etcd-keys';
import { entryRecheckTxn } from './etcd-mode-requests';
import { DEFAULT_ETCD_HOSTS, etcdAddress, sessionTtlSeconds, validateEtcdOptions, type EtcdBackendOptions } from './etcd-options';
import { EtcdRenewals } from './etcd-renewals';
import { rangeKvs, tryTakeTxn } from './etcd-requests';
import { SessionRanOut, type EtcdSession } from './etcd-session';
import { EtcdSessions } from './etcd-sessions';
import { LocalFollowers } from './local-followers';

/** What the backend needs besides the client; see createEtcdBackend. */
export interface EtcdBackendConfig {
  readonly address: string;
  readonly sessionTtlSeconds: number;
  readonly serverTimeoutMs: number;
  /** How long one attempt may go unanswered (etcd3 retries it on another member). */
  readonly attemptTimeoutMs: number;
  /** False for a user-supplied client: it is never closed here, and gets a deadline per call. */
  readonly ownsClient: boolean;
  /** https hosts or TLS credentials: errors of a failed handshake say so. Default false. */
  readonly usesTls?: boolean;
  /** The module's keyPrefix: where holder descriptions are kept (holderRecordKey). Default DEFAULT_KEY_PREFIX. */
  readonly keyPrefix?: string;
  /** This process's holderDescription, put once per session beside the locks; none: not put. */
  readonly holderDescription?: string;
}

/**
 * Locks on etcd with the recipe of etcd's own concurrency.Mutex: one session lease per backend
 * (per process), a key per queued batch of callers under the lock name's prefix, the lowest
 * create revision holds, each batch watches only its predecessor. A process's callers of one
 * name share a key (LocalQueues); the fencing token is the key's create revision shifted left by
 * 16 bits, plus the caller's turn under that key. Read and permit entries are keys in the same
 * queue, whose value says their mode: a read key serves the process's readers together, a permit
 * key one caller. One EtcdAcquisition decides when an entry of any mode goes.
 */
export class EtcdLockBackend extends LocalQueueBackend<EtcdBatch> implements LockBackend {
  readonly name = 'etcd';
  readonly maxKeyBytes = 1024;
  /** Read and permit entries are batches too (LocalQueues), with their mode in the key's value. */
  readonly modes: readonly EntryMode[] = ['write', 'read', 'permit'];
  /** A holder's delay key, on a lease that outlives its session's by the delay (DelayLeases, etcd-keys.ts). */
  readonly lockDelay = true;
  lockDelayRefusal(mode: EntryMode): string | undefined {
    return exclusiveLockDelayOnly('etcd', mode);
  }
  readonly address: string;
  protected readonly calls: EtcdCalls;
  protected readonly sessions: EtcdSessions;
  /** Queued batches by their own key (latin1), for the hand-off of a local release. */
  private readonly waiting = new Map<string, EtcdAcquisition>();
  protected readonly deletes: EtcdKeyDeletes;
  private readonly localFollowers: LocalFollowers;
  private readonly acquisitions: AcquisitionContext;
  private readonly inspector: EtcdInspector;
  private readonly renewals = new EtcdRenewals((session, operation, request) => this.txn(session, operation, request));

  constructor(
    protected readonly client: Etcd3,
    protected readonly config: EtcdBackendConfig,
  ) {
    super('etcd', { sendFirstAtOnce: true });
    this.address = config.address;
    const callTimeoutMs = config.ownsClient ? undefined : config.serverTimeoutMs;
    this.calls = new EtcdCalls(client, config.address, config.attemptTimeoutMs, callTimeoutMs, config.usesTls);
    this.localFollowers = new LocalFollowers(LATE_PUT_MS);
    this.deletes = new EtcdKeyDeletes(
      (session, operation, request) => this.txn(session, operation, request),
      (lowest) => this.waiting.get(lowest.key.toString('latin1'))?.grantedByRelease(lowest),
      this.localFollowers,
      () => this.waiting.size > 0,
    );
    this.acquisitions = {
      client,
      localFollowers: this.localFollowers,
      safetyNetMs: watchSafetyNetMs(config.sessionTtlSeconds),
      txn: (session, request) => this.txn(session, 'queue for a lock', request),
    };
    const keyPrefix = config.keyPrefix ?? DEFAULT_KEY_PREFIX;
    this.inspector = new EtcdInspector(client, this.calls, keyPrefix);
    this.sessions = new EtcdSessions(client, config.sessionTtlSeconds, this.calls, config.serverTimeoutMs, callTimeoutMs, (session, reason) => this.sessionLost(session, reason), (session) =>
      this.recordHolder(session, keyPrefix),
    );
  }

  /**
   * Puts this process's holder description with the new session's lease, once per session and
   * off every lock's path (no acquisition waits for it): inspect() shows it for the session's
   * locks, and it goes with the lease. Best effort: without it, inspect shows no description.
   */
  private recordHolder(session: EtcdSession, keyPrefix: string): void {
    const description = this.config.holderDescription;
    if (description === undefined) return;
    const request = { key: holderRecordKey(keyPrefix, session.leaseId), value: Buffer.from(description), lease: session.leaseId };
    this.calls.call('record the holder description', (options) => this.client.kv.put(request, options)).catch(() => undefined);
  }

  /** A transport failure or a call unanswered too long (EtcdCalls), or no session yet. */
  unreachable(): Error | undefined {
    return this.calls.unreachable() ?? this.sessions.missing();
  }

  /** A member's status (EtcdCalls.ping), each attempt bounded as every call is. */
  async ping(): Promise<void> {
    this.lifecycle.assertOpen();
    await this.calls.ping();
  }

  /**
   * A write puts its key only if no key exists under the name (one transaction); a read or permit
   * puts its entry and keeps it only if the rule lets it go at once. `retryOnNewSession`: as for send().
   */
  protected async tryTake(request: Omit<AcquireRequest, 'signal'>, retryOnNewSession = true): Promise<LockGrant | null> {
    const invalid = badLimit(request);
    if (invalid) throw invalid;
    const { key, owner } = request;
    const session = await this.sessions.session('take a lock');
    const batch = new EtcdBatch(key, owner);
    batch.keys = this.entryKeys(session, key, request.lockDelayMs);
    batch.session = session;
    const write = (request.mode ?? 'write') === 'write';
    let entryToken: bigint | null;
    try {
      entryToken = write ? await this.takeFree(batch, request.lockDelayMs) : await this.takeIfItGoes(batch, request);
    } catch (error) {
      // A write of a name this process queued for meanwhile is busy (LocalQueueBackend.tryAcquire).
      if (retryOnNewSession && this.sessionDropped(session, error)) return write && this.queues.has(key) ? null : this.tryTake(request, false);
      throw error;
    }
    if (entryToken === null) return null;
    // Callers that queued meanwhile put their key after ours: they wait for this one.
    this.queues.adopt(batch, entryToken, request);
    return this.grant(batch, request);
  }

  /** A write's try: the key's create revision, or null when some key (or a lock-delay key) exists under the name. */
  private async takeFree({ keys, session }: EtcdBatch, lockDelayMs = 0): Promise<bigint | null> {
    let response: ITxnResponse;
    try {
      const delayLeaseId = lockDelayMs > 0 ? await session!.delayLeaseId(lockDelayMs) : undefined;
      response = await this.txn(session!, 'take a lock', tryTakeTxn(keys!, session!.leaseId, delayLeaseId));
    } catch (error) {
      this.deleteUnsure(keys!, session!);
      throw error;
    }
    if (response.succeeded) return BigInt(response.header.revision);
    keys!.slot?.free(BigInt(response.header.revision));
    return null;
  }

  /** A read's or permit's try, judged as a waiter's entry is: one that would wait is deleted before the answer, null. */
  private takeIfItGoes({ keys, session }: EtcdBatch, request: Omit<AcquireRequest, 'signal'>): Promise<bigint | null> {
    return new Promise((resolve, reject) => {
      let notFree = false;
      const acquisition = new EtcdAcquisition(
        this.acquisitions,
        request.key,
        session!,
        keys!,
        entryValue(request.mode!, request.limit, request.owner),
        {
          granted: resolve,
          failed: (error) => (error === NOT_FREE ? (notFree = true) : reject(error as Error)),
          cleanup: (revision) => {
            if (revision === undefined) return this.deletes.deleteUnsure(keys!, session!);
            const deleted = this.deletes.delete(keys!, revision, session!).catch(() => undefined);
            if (notFree) void deleted.then(() => resolve(null));
          },
        },
        true,
      );
      void acquisition.start();
    });
  }

  /**
   * The session keepalive keeps the key itself alive; renewing checks that the key is still ours
   * (same create revision) and the session alive, so the service can extend its local deadline.
   * Checks due in the same tick share one transaction (EtcdRenewals). It changes no lease at etcd,
   * so renewing for one reader of a shared read entry never shortens what another relies on.
   */
  async renew(grant: LockGrant): Promise<boolean> {
    const held = this.heldFor(grant);
    if (!held) return false;
    const { batch } = held;
    const session = batch.session!;
    if (!session.alive) return false;
    const stillOurs = await this.renewals.stillOurs(session, { key: batch.keys!.own, revision: batch.entryToken! });
    if (stillOurs && session.alive) return true;
    this.held.delete(grant.owner);
    if (!stillOurs) this.keyDeleted(batch, grant);
    return false;
  }

  /** The queue under the name, read from etcd (EtcdInspector). */
  async inspect(key: string): Promise<LockInspection> {
    this.lifecycle.assertOpen();
    return this.inspector.inspect(key);
  }

  /** Deletes the holder's key, whoever holds it (EtcdInspector). */
  async forceRelease(key: string): Promise<boolean> {
    this.lifecycle.assertOpen();
    return this.inspector.forceRelease(key);
  }

  async close(): Promise<void> {
    if (!this.lifecycle.beginClose()) return;
    const waitError = this.lifecycle.closedWhileWaiting();
    this.queues.closeAll(waitError);
    const heldError = this.lifecycle.closedWhileHeld();
    for (const held of this.held.values()) held.lost?.abort(heldError);
    this.held.clear();
    this.deletes.stop();
    this.localFollowers.clear();
    // Revoking the session deletes every key it still has, at once.
    await this.sessions.close(this.config.serverTimeoutMs, waitError);
    if (this.config.ownsClient) this.client.close();
  }

  /** BatchEntries: puts the batch's key once there is a session (bounded like any call). */
  send(batch: EtcdBatch): void {
    this.sessions.session('queue for a lock').then(
      (session) => this.enqueue(batch, session, true),
      (error) => this.queues.end(batch, error),
    );
  }

  /** `retryOnNewSession`: etcd may have dropped the session before this process noticed, and the put then fails ("lease not found"): a batch not queued yet queues once more, on a new session. */
  protected enqueue(batch: EtcdBatch, session: EtcdSession, retryOnNewSession: boolean): void {
    if (batch.state !== 'sending') return;
    if (!batch.hasCallers || !this.lifecycle.isOpen) return this.queues.end(batch);
    const keys = session.entryKeys(batch.key, batch.lockDelayMs);
    const ownId = keys.own.toString('latin1');
    batch.keys = keys;
    batch.session = session;
    const invalid = badLimit(batch);
    if (invalid) return this.queues.end(batch, invalid);
    const entry = entryValue(batch.mode, batch.limit, batch.peek()?.request.owner);
    const acquisition = new EtcdAcquisition(
      this.acquisitions,
      batch.key,
      session,
      keys,
      entry,
      {
        granted: (revision) => {
          this.forget(ownId, acquisition);
          this.queues.holds(batch, revision);
        },
        failed: (error) => {
          this.forget(ownId, acquisition);
          if (batch.state === 'ended') return;
          const retry = retryOnNewSession && !acquisition.queued && this.sessionDropped(session, error) && batch.hasCallers;
          if (!retry) return this.queues.end(batch, error);
          this.sessions.session('queue for a lock').then(
            (next) => this.enqueue(batch, next, false),
            (refused) => this.queues.end(batch, refused),
          );
        },
        cleanup: (revision) => (revision === undefined ? this.deletes.deleteUnsure(keys, session) : void this.deletes.delete(keys, revision, session).catch(() => undefined)),
      },
      false,
      batch.lockDelayMs,
    );
    batch.acquisition = acquisition;
    this.waiting.set(ownId, acquisition);
    void acquisition.start().then(() => this.queues.sent(batch, acquisition.queued));
  }

  /** Own key names are reused (EntrySlots): only this acquisition's entry is removed. */
  private forget(ownId: string, acquisition: EtcdAcquisition): void {
    if (this.waiting.get(ownId) === acquisition) this.waiting.delete(ownId);
  }

  /** BatchEntries: a batch still waiting for a session ends when that session comes (enqueue). */
  withdraw(batch: EtcdBatch, reason: unknown): void {
    batch.acquisition?.stop(reason);
  }

  /** BatchEntries: one transaction deletes the key, and grants a batch of this process that its answer shows as the lowest key. */
  async remove(batch: EtcdBatch): Promise<void> {
    await this.deletes.delete(batch.keys!, batch.entryToken, batch.session!);
  }

  /** BatchEntries: checking the session fires onSessionLost when its deadline passed, which ends the batch. */
  usable(batch: EtcdBatch): boolean {
    return batch.session!.alive;
  }

  /** BatchEntries: the previous holder's lease ran out here: read that our key still exists and the rule still lets it go. */
  async confirm(batch: EtcdBatch): Promise<true | Error> {
    let response: ITxnResponse;
    try {
      response = await this.txn(batch.session!, 'queue for a lock', entryRecheckTxn(batch.mode, batch.keys!, batch.entryToken!));
    } catch (error) {
      void this.deletes.delete(batch.keys!, batch.entryToken, batch.session!).catch(() => undefined);
      return error as Error;
    }
    if (!response.succeeded) return this.keyGone('keep its place in the queue');
    if (decide(batch.mode, batch.limit ?? 0, rangeKvs(response, 0)).kind === 'grant') return true;
    // A put that committed late is no longer the lowest: its callers start again.
    void this.deletes.delete(batch.keys!, batch.entryToken, batch.session!).catch(() => undefined);
    return new LockBackendError('etcd', 'keep its place in the queue', new Error('another key now precedes the lock key'), this.address);
  }

  protected newBatch(name: string, id: string): EtcdBatch {
    return new EtcdBatch(name, id);
  }

  /** BatchEntries: the grant of a caller served under the batch's key. */
  grant(batch: EtcdBatch, { key, owner }: Pick<AcquireRequest, 'key' | 'owner'>): LockGrant {
    const lost = new LazyAbort();
    const grant = new GrantWithLoss(key, owner, batch.token(), lost);
    this.held.set(owner, { grant, lost, batch });
    // Granted by an answer that raced with the session's loss: report it lost at once.
    if (!batch.session!.alive && this.held.get(owner)?.grant === grant) {
      this.held.delete(owner);
      lost.abort(new LockBackendError('etcd', 'keep its session', batch.session!.reason, this.address));
    }
    return grant;
  }

  /**
   * A renewal found the batch's key deleted by someone else (an operator's forceRelease): a
   * batch of this process following that key looks again; the other readers sharing the key lost
   * it too (their lost signal fires), and the callers still waiting in the batch queue anew, at
   * the back, as long as the holder told is one of the batch's current ones.
   */
  private keyDeleted(batch: EtcdBatch, grant: LockGrant): void {
    this.localFollowers.gone(batch.keys!.own, batch.entryToken, this.waiting.size > 0);
    const error = this.keyGone('renew a lock');
    for (const [owner, held] of this.held) {
      if (held.batch !== batch) continue;
      this.held.delete(owner);
      held.lost?.abort(error);
    }
    if (batch.holders.has(grant.owner)) this.queues.requeue(batch);
    else this.queues.end(batch, error);
  }

  /** The keys of a new entry of `name` on `session`. */
  protected entryKeys(session: EtcdSession, name: string, lockDelayMs?: number): LockKeys {
    return session.entryKeys(name, lockDelayMs);
  }

  /** Deletes a key whose put failed in flight (EtcdKeyDeletes.deleteUnsure). */
  protected deleteUnsure(keys: LockKeys, session: EtcdSession): void {
    this.deletes.deleteUnsure(keys, session);
  }

  /** Every lock and wait on a lost session ends now; the next session is being opened. */
  protected sessionLost(session: EtcdSession, reason: Error): void {
    this.sessions.lost(session);
    // Ran out unanswered: etcd could not be reached (the lost reason says so); else etcd said so.
    const error =
      reason instanceof SessionRanOut
        ? new LockServerUnreachableError('etcd', 'keep its session', this.address, reason.silentMs, this.calls.unreachable() ?? reason)
        : new LockBackendError('etcd', 'keep its session', reason, this.address);
    for (const [owner, held] of this.held) {
      if (held.batch.session !== session) continue;
      this.held.delete(owner);
      held.lost?.abort(error);
    }
    for (const batch of this.queues.batches()) {
      if (batch.session !== session) continue;
      if (batch.state === 'holding') this.queues.end(batch, error);
      else batch.acquisition?.stop(error);
    }
    // If the server still has it (we only lost contact), its keys go now rather than at its ttl.
    if (this.lifecycle.isOpen) void session.revoke(this.config.serverTimeoutMs);
  }

  /**
   * The call failed because etcd no longer had the session ("lease not found"): worth one more
   * try on a new session. Not when etcd could not be reached: that try would only wait again.
   */
  protected sessionDropped(session: EtcdSession, error: unknown): boolean {
    return !session.alive && this.lifecycle.isOpen && !(error instanceof LockServerUnreachableError);
  }

  protected keyGone(operation: string): LockBackendError {
    return new LockBackendError('etcd', operation, new Error('the lock key was deleted: its session lease expired, or an operator removed it'), this.address);
  }

  protected txn(session: EtcdSession, operation: string, request: ITxnRequest): Promise<ITxnResponse> {
    return this.calls.txn(operation, request).catch((error: Error) => {
      if (/lease not found|expired or revoked/i.test(error.message)) session.end(error);
      throw error;
    });
  }
}

/**
 * Validates before any I/O, then loads etcd3 (only now: it is an optional peer). Never waits for
 * etcd: the session is opened in the background.
 */
export function createEtcdBackend(options: EtcdBackendOptions, settings: BackendSettings = { ttlMs: DEFAULT_TTL_MS, serverTimeoutMs: DEFAULT_SERVER_TIMEOUT_MS }): EtcdLockBackend {
  return new EtcdLockBackend(...etcdBackendParts(options, settings));
}

/** The client and config of an etcd backend of either protocol, from its validated options. */
export function etcdBackendParts(options: EtcdBackendOptions, settings: BackendSettings): [Etcd3, EtcdBackendConfig] {
  validateEtcdOptions(options);
  const ttlSeconds = sessionTtlSeconds(options.sessionTtlMs ?? settings.ttlMs);
  // Every attempt of a call within serverTimeoutMs in all, unless that leaves an attempt too little.
  const attemptTimeoutMs = Math.max(500, Math.floor(settings.serverTimeoutMs / ATTEMPTS));
  const config = { sessionTtlSeconds: ttlSeconds, serverTimeoutMs: settings.serverTimeoutMs, attemptTimeoutMs, keyPrefix: settings.keyPrefix, holderDescription: settings.holderDescription };
  if (options.client) return [options.client as unknown as Etcd3, { ...config, address: suppliedClientAddress(options.client), ownsClient: false }];
  const hosts = options.hosts ?? DEFAULT_ETCD_HOSTS;
  const usesTls = options.credentials !== undefined || [hosts].flat().some((host) => host.startsWith('https://'));
  return [createEtcdClient(options, hosts, attemptTimeoutMs), { ...config, address: etcdAddress(hosts), ownsClient: true, usesTls }];
}

/** What a batch's key says at etcd: a write's nothing; a read's or permit's its mode, and the caller it was put for. */
function entryValue(mode: EntryValue['mode'], limit: number | undefined, owner: string | undefined): EntryValue {
  return mode === 'write' ? WRITE_ENTRY : { mode, limit, owner };
}

const WRITE_ENTRY: EntryValue = { mode: 'write' };
