import type { Etcd3, ITxnRequest, ITxnResponse } from 'etcd3';
import { LockBackendError, LockServerUnreachableError } from '../../errors';
import { DEFAULT_SERVER_TIMEOUT_MS, DEFAULT_TTL_MS } from '../../lock-defaults';
import type { BackendSettings } from '../backend-definition';
import { BackendLifecycle } from '../backend-lifecycle';
import type { AcquireRequest, LockBackend, LockGrant } from '../lock-backend.interface';
import { PendingWait } from '../pending-wait';
import { EtcdAcquisition, watchSafetyNetMs } from './etcd-acquisition';
import { EtcdCalls } from './etcd-calls';
import { ATTEMPTS, createEtcdClient, suppliedClientAddress } from './etcd-client';
import { EtcdKeyDeletes, LATE_PUT_MS } from './etcd-key-deletes';
import { lockKeys } from './etcd-keys';
import { Batch, LocalQueue } from './etcd-local-queue';
import { DEFAULT_ETCD_HOSTS, etcdAddress, sessionTtlSeconds, validateEtcdOptions, type EtcdBackendOptions } from './etcd-options';
import { ownKeyTxn, recheckTxn, rangeKvs, tryTakeTxn } from './etcd-requests';
import { SessionRanOut, type EtcdSession } from './etcd-session';
import { EtcdSessions } from './etcd-sessions';
import { LocalFollowers } from './local-followers';

interface HeldLock {
  readonly grant: LockGrant;
  readonly lost: AbortController;
  readonly batch: Batch;
}

/** What the backend needs besides the client; see createEtcdBackend. */
export interface EtcdBackendConfig {
  readonly address: string;
  readonly sessionTtlSeconds: number;
  readonly serverTimeoutMs: number;
  /** How long one attempt may go unanswered (etcd3 retries it on another member). */
  readonly attemptTimeoutMs: number;
  /** False for a user-supplied client: it is never closed here, and gets a deadline per call. */
  readonly ownsClient: boolean;
}

/**
 * Locks on etcd with the recipe of etcd's own concurrency.Mutex: one session lease per backend
 * (per process), a key per queued batch of callers under the lock name's prefix, the lowest
 * create revision holds, each batch watches only its predecessor. A process's callers of one
 * name share a key (see Batch); the fencing token is the key's create revision shifted left by
 * 16 bits, plus the caller's turn under that key.
 */
export class EtcdLockBackend implements LockBackend {
  readonly name = 'etcd';
  readonly maxKeyBytes = 1024;
  readonly address: string;
  private readonly lifecycle = new BackendLifecycle('etcd');
  private readonly calls: EtcdCalls;
  private readonly sessions: EtcdSessions;
  private readonly held = new Map<string, HeldLock>();
  /** This process's callers by lock name. */
  private readonly queues = new Map<string, LocalQueue>();
  /** Queued batches by their own key (latin1), for the hand-off of a local release. */
  private readonly waiting = new Map<string, EtcdAcquisition>();
  private readonly deletes: EtcdKeyDeletes;
  private readonly localFollowers: LocalFollowers;
  private readonly safetyNetMs: number;

  constructor(
    private readonly client: Etcd3,
    private readonly config: EtcdBackendConfig,
  ) {
    this.address = config.address;
    const callTimeoutMs = config.ownsClient ? undefined : config.serverTimeoutMs;
    this.calls = new EtcdCalls(client, config.address, config.attemptTimeoutMs, callTimeoutMs);
    this.localFollowers = new LocalFollowers(LATE_PUT_MS);
    this.deletes = new EtcdKeyDeletes(
      (session, operation, request) => this.txn(session, operation, request),
      (lowest) => this.waiting.get(lowest.key.toString('latin1'))?.grantedByRelease(lowest),
      this.localFollowers,
      () => this.waiting.size > 0,
    );
    this.safetyNetMs = watchSafetyNetMs(config.sessionTtlSeconds);
    this.sessions = new EtcdSessions(client, config.sessionTtlSeconds, this.calls, config.serverTimeoutMs, callTimeoutMs, this.onSessionLost);
  }

  /** A transport failure or a call unanswered too long (EtcdCalls), or no session yet. */
  unreachable(): Error | undefined {
    return this.calls.unreachable() ?? this.sessions.missing();
  }

  /**
   * Joins this process's batch for the name (see Batch). The wait is bounded by the request's
   * signal only: LockService aborts it at waitTimeoutMs and asks unreachable() why.
   */
  async acquire(request: AcquireRequest): Promise<LockGrant> {
    this.lifecycle.assertOpen();
    request.signal.throwIfAborted();
    let queue = this.queues.get(request.key);
    if (!queue) this.queues.set(request.key, (queue = new LocalQueue(request.key)));
    const wait = new PendingWait<LockGrant>();
    const batch = queue.join({ request, wait });
    wait.listen(request.signal, () => this.left(queue, batch, request.signal.reason));
    // On the next turn of the event loop, so that a burst's callers all join this batch.
    if (batch.state === 'open' && !queue.pumpScheduled) {
      queue.pumpScheduled = true;
      setImmediate(() => {
        queue.pumpScheduled = false;
        this.pump(queue);
      });
    }
    return wait.promise;
  }

  /**
   * One transaction: put our key only if no key exists under the name. A name this process is
   * already queued on is taken: null at once.
   */
  async tryAcquire(request: Omit<AcquireRequest, 'signal'>): Promise<LockGrant | null> {
    this.lifecycle.assertOpen();
    return this.tryTake(request, true);
  }

  /** `retryOnNewSession`: as for enqueue(). */
  private async tryTake(request: Omit<AcquireRequest, 'signal'>, retryOnNewSession: boolean): Promise<LockGrant | null> {
    const { key, owner } = request;
    if (this.queues.has(key)) return null;
    const session = await this.sessions.session('take a lock');
    const batch = new Batch(key, owner);
    batch.keys = lockKeys(key, session.leaseId, owner);
    batch.session = session;
    let response: ITxnResponse;
    try {
      response = await this.txn(session, 'take a lock', tryTakeTxn(batch.keys, session.leaseId));
    } catch (error) {
      this.deletes.deleteUnsure(batch.keys, session);
      if (retryOnNewSession && this.sessionDropped(session, error)) return this.tryTake(request, false);
      throw error;
    }
    if (!response.succeeded) return null;
    batch.revision = BigInt(response.header.revision);
    batch.state = 'holding';
    let queue = this.queues.get(key);
    if (!queue) this.queues.set(key, (queue = new LocalQueue(key)));
    // Callers that queued meanwhile put their key after ours: they wait for this one.
    queue.batches.unshift(batch);
    return this.hold(key, owner, batch);
  }

  /**
   * The session keepalive keeps the key itself alive; renewing checks that the key is still ours
   * (same create revision) and the session alive, so the service can extend its local deadline.
   */
  async renew(grant: LockGrant): Promise<boolean> {
    const held = this.heldFor(grant);
    if (!held) return false;
    const { batch } = held;
    if (!batch.session!.alive) return false;
    const response = await this.txn(batch.session!, 'renew a lock', ownKeyTxn(batch.keys!, batch.revision!));
    if (response.succeeded && batch.session!.alive) return true;
    this.held.delete(grant.owner);
    if (!response.succeeded) this.ended(batch, this.keyGone('renew a lock'));
    return false;
  }

  /**
   * Hands the lock to the next caller of this batch, with no round trip (our key stays the
   * lowest), when the lease is known valid (`validForMs`); otherwise confirms first that the key
   * still holds the lock. With no caller left: one transaction deletes our key, and grants a
   * batch of this process that its answer shows as the lowest key.
   */
  async release(grant: LockGrant, validForMs?: number): Promise<void> {
    const held = this.heldFor(grant);
    if (!held) return;
    this.held.delete(grant.owner);
    const { batch } = held;
    batch.holder = undefined;
    // A lost session's keys go with its lease.
    if (batch.state !== 'holding' || !batch.session!.alive) return;
    if (batch.hasMembers && this.lifecycle.isOpen) return validForMs === undefined ? this.confirmThenServe(batch) : this.serve(batch);
    await this.finish(batch);
  }

  async close(): Promise<void> {
    if (!this.lifecycle.beginClose()) return;
    const waitError = this.lifecycle.closedWhileWaiting();
    for (const queue of [...this.queues.values()]) {
      for (const batch of [...queue.batches]) {
        if (batch.acquisition && batch.state !== 'holding') batch.acquisition.stop(waitError);
        this.ended(batch, waitError);
      }
    }
    const heldError = this.lifecycle.closedWhileHeld();
    for (const held of this.held.values()) held.lost.abort(heldError);
    this.held.clear();
    this.deletes.stop();
    this.localFollowers.clear();
    // Revoking the session deletes every key it still has, at once.
    await this.sessions.close(this.config.serverTimeoutMs, waitError);
    if (this.config.ownsClient) this.client.close();
  }

  /** Puts the key of the queue's next batch, once the put before it has answered. */
  private pump(queue: LocalQueue): void {
    const batch = queue.sendable();
    if (!batch || !this.lifecycle.isOpen) return;
    if (!batch.hasMembers) return this.ended(batch);
    batch.state = 'sending';
    // Bounded like any call: an acquisition ends by min(waitTimeoutMs, serverTimeoutMs) when etcd cannot be reached.
    this.sessions.session('queue for a lock').then(
      (session) => this.enqueue(queue, batch, session, true),
      (error) => this.ended(batch, error),
    );
  }

  /** `retryOnNewSession`: etcd may have dropped the session before this process noticed, and the put then fails ("lease not found"): a batch not queued yet queues once more, on a new session. */
  private enqueue(queue: LocalQueue, batch: Batch, session: EtcdSession, retryOnNewSession: boolean): void {
    if (batch.state !== 'sending') return;
    if (!batch.hasMembers || !this.lifecycle.isOpen) return this.ended(batch);
    const keys = lockKeys(batch.name, session.leaseId, batch.id);
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
          this.waiting.delete(ownId);
          batch.revision = revision;
          batch.state = 'holding';
          this.serve(batch);
        },
        failed: (error) => {
          this.waiting.delete(ownId);
          if (batch.state === 'ended') return;
          const retry = retryOnNewSession && !acquisition.queued && this.sessionDropped(session, error) && batch.hasMembers;
          if (!retry) return this.ended(batch, error);
          this.sessions.session('queue for a lock').then(
            (next) => this.enqueue(queue, batch, next, false),
            (refused) => this.ended(batch, refused),
          );
        },
        cleanup: (revision) => (revision === undefined ? this.deletes.deleteUnsure(keys, session) : void this.deletes.delete(keys, revision, session).catch(() => undefined)),
      },
      this.safetyNetMs,
    );
    batch.acquisition = acquisition;
    this.waiting.set(ownId, acquisition);
    void acquisition.start().then(() => {
      if (batch.state === 'sending' && acquisition.queued) batch.state = 'queued';
      this.pump(queue);
    });
  }

  /** Our key holds the lock: the batch's next caller gets it. */
  private serve(batch: Batch): void {
    if (batch.state !== 'holding' || batch.holder !== undefined) return;
    // Checking it fires onSessionLost when the session's deadline passed: that ends the batch.
    if (!batch.session!.alive) return;
    const member = batch.next();
    if (!member) return void this.finish(batch).catch(() => undefined);
    member.wait.resolve(this.hold(member.request.key, member.request.owner, batch));
  }

  /** The previous holder's lease ran out here: read that our key still holds before serving on. */
  private confirmThenServe(batch: Batch): void {
    this.txn(batch.session!, 'queue for a lock', recheckTxn(batch.keys!, batch.revision!)).then(
      (response) => {
        if (response.succeeded && rangeKvs(response, 0).length === 0) return this.serve(batch);
        // Gone, or (a put that committed late) no longer the lowest: its callers start again.
        const lost = response.succeeded ? new Error('another key now precedes the lock key') : undefined;
        this.ended(batch, lost ? new LockBackendError('etcd', 'keep its place in the queue', lost, this.address) : this.keyGone('keep its place in the queue'));
        if (response.succeeded) void this.deletes.delete(batch.keys!, batch.revision, batch.session!).catch(() => undefined);
      },
      (error) => {
        this.ended(batch, error);
        void this.deletes.delete(batch.keys!, batch.revision, batch.session!).catch(() => undefined);
      },
    );
  }

  /** No caller left: the batch leaves, and its key goes (granting the next batch of the process, if it is next). */
  private async finish(batch: Batch): Promise<void> {
    this.ended(batch);
    await this.deletes.delete(batch.keys!, batch.revision, batch.session!);
  }

  /** A caller of `batch` gave up: a batch nobody waits in any more leaves the queue. */
  private left(queue: LocalQueue, batch: Batch, reason: unknown): void {
    if (batch.hasMembers || batch.state === 'holding' || batch.state === 'ended') return;
    if (batch.acquisition) batch.acquisition.stop(reason);
    else if (batch.state === 'open') this.ended(batch);
    this.pump(queue);
  }

  /** The batch is over: its remaining callers get `error`, and the queue moves on. */
  private ended(batch: Batch, error?: unknown): void {
    if (batch.state === 'ended') return;
    batch.state = 'ended';
    batch.rejectAll(error ?? this.lifecycle.closedWhileWaiting());
    const queue = this.queues.get(batch.name);
    if (!queue) return;
    queue.remove(batch);
    if (queue.empty) this.queues.delete(batch.name);
    else this.pump(queue);
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
      held.lost.abort(error);
    }
    for (const queue of [...this.queues.values()]) {
      for (const batch of [...queue.batches]) {
        if (batch.session !== session) continue;
        if (batch.state === 'holding') this.ended(batch, error);
        else batch.acquisition?.stop(error);
      }
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

  /** The held lock of this very grant: a stale grant of a reused owner id does not match. */
  private heldFor(grant: LockGrant): HeldLock | undefined {
    const held = this.held.get(grant.owner);
    return held?.grant.fencingToken === grant.fencingToken ? held : undefined;
  }

  private hold(key: string, owner: string, batch: Batch): LockGrant {
    const lost = new AbortController();
    const grant: LockGrant = { key, owner, fencingToken: batch.token(), lost: lost.signal };
    this.held.set(owner, { grant, lost, batch });
    batch.holder = owner;
    // Granted by an answer that raced with the session's loss: report it lost at once.
    if (!batch.session!.alive && this.held.get(owner)?.grant === grant) {
      this.held.delete(owner);
      lost.abort(new LockBackendError('etcd', 'keep its session', batch.session!.reason, this.address));
    }
    return grant;
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
  return new EtcdLockBackend(createEtcdClient(options, hosts, attemptTimeoutMs), { ...config, address: etcdAddress(hosts), ownsClient: true });
}
