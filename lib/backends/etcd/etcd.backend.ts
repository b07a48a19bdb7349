import type { Etcd3, ITxnRequest, ITxnResponse } from 'etcd3';
import { LockBackendError, LockServerUnreachableError } from '../../errors';
import { DEFAULT_SERVER_TIMEOUT_MS, DEFAULT_TTL_MS } from '../../lock-defaults';
import type { BackendSettings } from '../backend-definition';
import type { AcquireRequest, LockBackend, LockGrant, LockInspection } from '../lock-backend.interface';
import { LocalQueueBackend } from '../../queue/local-queue-backend';
import { EtcdAcquisition, watchSafetyNetMs } from './etcd-acquisition';
import { EtcdCalls } from './etcd-calls';
import { ATTEMPTS, createEtcdClient, suppliedClientAddress } from './etcd-client';
import { EtcdInspector } from './etcd-inspect';
import { EtcdKeyDeletes, LATE_PUT_MS } from './etcd-key-deletes';
import { EtcdBatch } from './etcd-batch';
import { EtcdModeEntries } from './etcd-mode-entries';
import { DEFAULT_ETCD_HOSTS, etcdAddress, sessionTtlSeconds, validateEtcdOptions, type EtcdBackendOptions } from './etcd-options';
import { EtcdRenewals } from './etcd-renewals';
import { recheckTxn, rangeKvs, tryTakeTxn } from './etcd-requests';
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
}

/**
 * Locks on etcd with the recipe of etcd's own concurrency.Mutex: one session lease per backend
 * (per process), a key per queued batch of callers under the lock name's prefix, the lowest
 * create revision holds, each batch watches only its predecessor. A process's callers of one
 * name share a key (LocalQueues); the fencing token is the key's create revision shifted left by
 * 16 bits, plus the caller's turn under that key. Read and permit entries are keys of their own in
 * the same queue, one per caller (EtcdModeEntries).
 */
export class EtcdLockBackend extends LocalQueueBackend<EtcdBatch> implements LockBackend {
  readonly name = 'etcd';
  readonly maxKeyBytes = 1024;
  /** Read and permit entries: one key per caller, in the same queue (EtcdModeEntries). */
  readonly modes = ['write', 'read', 'permit'] as const;
  readonly address: string;
  private readonly calls: EtcdCalls;
  private readonly sessions: EtcdSessions;
  /** Queued batches by their own key (latin1), for the hand-off of a local release. */
  private readonly waiting = new Map<string, EtcdAcquisition>();
  private readonly deletes: EtcdKeyDeletes;
  private readonly localFollowers: LocalFollowers;
  private readonly safetyNetMs: number;
  private readonly inspector: EtcdInspector;
  private readonly renewals = new EtcdRenewals((session, operation, request) => this.txn(session, operation, request));
  private readonly entries: EtcdModeEntries;

  constructor(
    private readonly client: Etcd3,
    private readonly config: EtcdBackendConfig,
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
    this.safetyNetMs = watchSafetyNetMs(config.sessionTtlSeconds);
    this.inspector = new EtcdInspector(client, this.calls);
    this.sessions = new EtcdSessions(client, config.sessionTtlSeconds, this.calls, config.serverTimeoutMs, callTimeoutMs, this.onSessionLost);
    this.entries = new EtcdModeEntries({
      client,
      lifecycle: this.lifecycle,
      sessions: this.sessions,
      txn: (session, operation, request) => this.txn(session, operation, request),
      deletes: this.deletes,
      renewals: this.renewals,
      localFollowers: this.localFollowers,
      mayBeFollowed: () => this.waiting.size > 0,
      sessionDropped: (session, error) => this.sessionDropped(session, error),
      safetyNetMs: this.safetyNetMs,
    });
  }

  /** A write (the default) queues in this process's batch for the name; read and permit entries each put their own key. */
  override acquire(request: AcquireRequest): Promise<LockGrant> {
    return request.mode === undefined || request.mode === 'write' ? super.acquire(request) : this.entries.acquire(request);
  }

  override tryAcquire(request: Omit<AcquireRequest, 'signal'>): Promise<LockGrant | null> {
    return request.mode === undefined || request.mode === 'write' ? super.tryAcquire(request) : this.entries.tryAcquire(request);
  }

  override release(grant: LockGrant, validForMs?: number): Promise<void> {
    return this.entries.holding && !this.heldFor(grant) ? this.entries.release(grant) : super.release(grant, validForMs);
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

  /** One transaction: put our key only if no key exists under the name. `retryOnNewSession`: as for send(). */
  protected async tryTake(request: Omit<AcquireRequest, 'signal'>, retryOnNewSession = true): Promise<LockGrant | null> {
    const { key, owner } = request;
    const session = await this.sessions.session('take a lock');
    const batch = new EtcdBatch(key, owner);
    batch.keys = session.entryKeys(key);
    batch.session = session;
    let response: ITxnResponse;
    try {
      response = await this.txn(session, 'take a lock', tryTakeTxn(batch.keys, session.leaseId));
    } catch (error) {
      this.deletes.deleteUnsure(batch.keys, session);
      if (retryOnNewSession && this.sessionDropped(session, error)) return this.queues.has(key) ? null : this.tryTake(request, false);
      throw error;
    }
    if (!response.succeeded) {
      batch.keys.slot?.free(BigInt(response.header.revision));
      return null;
    }
    // Callers that queued meanwhile put their key after ours: they wait for this one.
    this.queues.adopt(batch, BigInt(response.header.revision), { owner });
    return this.grant(batch, request);
  }

  /**
   * The session keepalive keeps the key itself alive; renewing checks that the key is still ours
   * (same create revision) and the session alive, so the service can extend its local deadline.
   * Checks due in the same tick share one transaction (EtcdRenewals).
   */
  async renew(grant: LockGrant): Promise<boolean> {
    const held = this.heldFor(grant);
    if (!held) return this.entries.renew(grant);
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
    this.entries.close(waitError, heldError);
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
  private enqueue(batch: EtcdBatch, session: EtcdSession, retryOnNewSession: boolean): void {
    if (batch.state !== 'sending') return;
    if (!batch.hasCallers || !this.lifecycle.isOpen) return this.queues.end(batch);
    const keys = session.entryKeys(batch.key);
    const ownId = keys.own.toString('latin1');
    batch.keys = keys;
    batch.session = session;
    const acquisition = new EtcdAcquisition(
      this.client,
      session,
      keys,
      (request) => this.txn(session, 'queue for a lock', request),
      this.localFollowers,
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
      this.safetyNetMs,
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

  /** BatchEntries: the previous holder's lease ran out here: read that our key still holds. */
  async confirm(batch: EtcdBatch): Promise<true | Error> {
    let response: ITxnResponse;
    try {
      response = await this.txn(batch.session!, 'queue for a lock', recheckTxn(batch.keys!, batch.entryToken!));
    } catch (error) {
      void this.deletes.delete(batch.keys!, batch.entryToken, batch.session!).catch(() => undefined);
      return error as Error;
    }
    if (!response.succeeded) return this.keyGone('keep its place in the queue');
    if (rangeKvs(response, 0).length === 0) return true;
    // A put that committed late is no longer the lowest: its callers start again.
    void this.deletes.delete(batch.keys!, batch.entryToken, batch.session!).catch(() => undefined);
    return new LockBackendError('etcd', 'keep its place in the queue', new Error('another key now precedes the lock key'), this.address);
  }

  protected newBatch(name: string, id: string): EtcdBatch {
    return new EtcdBatch(name, id);
  }

  /** BatchEntries: the grant of a caller served under the batch's key. */
  grant(batch: EtcdBatch, { key, owner }: Pick<AcquireRequest, 'key' | 'owner'>): LockGrant {
    const lost = new AbortController();
    const grant: LockGrant = { key, owner, fencingToken: batch.token(), lost: lost.signal };
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
   * batch of this process following that key looks again, and the callers still waiting in the
   * batch queue anew, at the back, as long as the holder told is the batch's current one.
   */
  private keyDeleted(batch: EtcdBatch, grant: LockGrant): void {
    this.localFollowers.gone(batch.keys!.own, batch.entryToken, this.waiting.size > 0);
    if (batch.holder === grant.owner) this.queues.requeue(batch);
    else this.queues.end(batch, this.keyGone('renew a lock'));
  }

  /** Every lock and wait on a lost session ends now; the next session is being opened. */
  private readonly onSessionLost = (session: EtcdSession, reason: Error): void => {
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
    this.entries.sessionLost(session, error);
    for (const batch of this.queues.batches()) {
      if (batch.session !== session) continue;
      if (batch.state === 'holding') this.queues.end(batch, error);
      else batch.acquisition?.stop(error);
    }
    // If the server still has it (we only lost contact), its keys go now rather than at its ttl.
    if (this.lifecycle.isOpen) void session.revoke(this.config.serverTimeoutMs);
  };

  /**
   * The call failed because etcd no longer had the session ("lease not found"): worth one more
   * try on a new session. Not when etcd could not be reached: that try would only wait again.
   */
  private sessionDropped(session: EtcdSession, error: unknown): boolean {
    return !session.alive && this.lifecycle.isOpen && !(error instanceof LockServerUnreachableError);
  }

  private keyGone(operation: string): LockBackendError {
    return new LockBackendError('etcd', operation, new Error('the lock key was deleted: its session lease expired, or an operator removed it'), this.address);
  }

  private txn(session: EtcdSession, operation: string, request: ITxnRequest): Promise<ITxnResponse> {
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
  validateEtcdOptions(options);
  const ttlSeconds = sessionTtlSeconds(options.sessionTtlMs ?? settings.ttlMs);
  // Every attempt of a call within serverTimeoutMs in all, unless that leaves an attempt too little.
  const attemptTimeoutMs = Math.max(500, Math.floor(settings.serverTimeoutMs / ATTEMPTS));
  const config = { sessionTtlSeconds: ttlSeconds, serverTimeoutMs: settings.serverTimeoutMs, attemptTimeoutMs };
  if (options.client) return new EtcdLockBackend(options.client as unknown as Etcd3, { ...config, address: suppliedClientAddress(options.client), ownsClient: false });
  const hosts = options.hosts ?? DEFAULT_ETCD_HOSTS;
  const usesTls = options.credentials !== undefined || [hosts].flat().some((host) => host.startsWith('https://'));
  return new EtcdLockBackend(createEtcdClient(options, hosts, attemptTimeoutMs), { ...config, address: etcdAddress(hosts), ownsClient: true, usesTls });
}
