import type { Etcd3, IKeyValue, ITxnRequest, ITxnResponse } from 'etcd3';
import { DistributedLockError, LockBackendError } from '../../errors';
import type { BackendSettings } from '../backend-definition';
import type { AcquireRequest, LockBackend, LockGrant } from '../lock-backend.interface';
import { loadPeer } from '../load-peer';
import { EtcdAcquisition, watchSafetyNetMs } from './etcd-acquisition';
import { lockKeys, type LockKeys } from './etcd-keys';
import { DEFAULT_ETCD_HOSTS, sessionTtlSeconds, validateEtcdOptions, type EtcdBackendOptions } from './etcd-options';
import { createRevision, deleteOwnTxn, lowestAfterDelete, ownKeyTxn, tryTakeTxn } from './etcd-requests';
import { EtcdSession } from './etcd-session';
import { LocalFollowers } from './local-followers';
import { untilAborted } from '../until-aborted';

/**
 * Every call to etcd gets a deadline: without one, a request to a member that died or lost the
 * quorum waits forever. On a client the backend creates, the deadline is per attempt (etcd3's
 * `defaultCallOptions`), and etcd3 retries a timed-out attempt on another member (3 attempts):
 * a dead member costs one attempt, not the whole call. A user's client keeps its own defaults,
 * so each call on it gets CALL_TIMEOUT_MS in all. The locks' and the session's own deadlines run
 * meanwhile.
 */
const ATTEMPT_TIMEOUT_MS = 1_500;
const CALL_TIMEOUT_MS = 3 * ATTEMPT_TIMEOUT_MS;

/**
 * A holder hands the lock to the next waiter of its own process only when its lease is known
 * valid at least this much longer: the waiter holds it under that validity until etcd has the
 * holder's delete (one write, normally milliseconds). A lease about to end is better handed on
 * by etcd: the waiter is then granted from the delete's answer.
 */
const MIN_HANDOVER_VALIDITY_MS = 100;

/**
 * A put whose call failed may still commit: etcd had accepted the proposal when the deadline
 * passed. Its key is deleted by name at once and again this long after: twice a whole call's
 * deadline, past etcd's own request timeout (5 s + 2 election timeouts: 7 s by default), after
 * which a proposal has in practice committed or been dropped.
 */
const LATE_PUT_MS = 2 * CALL_TIMEOUT_MS;

interface HeldLock {
  readonly grant: LockGrant;
  readonly lost: AbortController;
  readonly keys: LockKeys;
  readonly revision: bigint;
  readonly session: EtcdSession;
}

/**
 * A lock handed over inside this process that etcd has not confirmed yet: the keys before the
 * holder's (this process's, being deleted) may still be there.
 */
interface UnconfirmedHandOver {
  readonly owner: string;
  readonly own: Buffer;
  readonly revision: bigint;
  readonly session: EtcdSession;
  /** Resolves the grant's `provisional.recorded`. */
  readonly confirm: (from: number | undefined) => void;
}

/**
 * Locks on etcd with the recipe of etcd's own concurrency.Mutex: one session lease per backend
 * (per process), a key per acquisition under the lock name's prefix, the lowest create revision
 * holds, each waiter watches only its predecessor. The fencing token is the key's create revision.
 */
export class EtcdLockBackend implements LockBackend {
  readonly name = 'etcd';
  readonly maxKeyBytes = 1024;
  private opening?: Promise<EtcdSession>;
  private current?: EtcdSession;
  private readonly held = new Map<string, HeldLock>();
  /** Waiting acquisitions by their own key (latin1), for the hand-off of a local release. */
  private readonly waiting = new Map<string, EtcdAcquisition>();
  /** By lock name (its range start, latin1): at most one holder per name in a process. */
  private readonly handOvers = new Map<string, UnconfirmedHandOver>();
  private readonly retryTimers = new Set<NodeJS.Timeout>();
  private readonly localFollowers = new LocalFollowers(2 * CALL_TIMEOUT_MS);
  private readonly safetyNetMs: number;
  private closed = false;

  constructor(
    private readonly client: Etcd3,
    /** False for a user-supplied client: it is never closed here. */
    private readonly ownsClient: boolean,
    private readonly sessionTtlSeconds: number,
  ) {
    this.safetyNetMs = watchSafetyNetMs(sessionTtlSeconds);
  }

  /**
   * Looks at the request's signal at once (see AcquireRequest.signal): every acquisition here
   * waits for at least one round trip to etcd, and a wait timeout or an abort must bound it.
   */
  acquire(request: AcquireRequest): Promise<LockGrant> {
    request.signal.throwIfAborted();
    return this.queue(request, true);
  }

  /** One transaction: put our key only if no key exists under the name. */
  tryAcquire(request: Omit<AcquireRequest, 'signal'>): Promise<LockGrant | null> {
    return this.tryTake(request, true);
  }

  /**
   * Queues on the live session (opening one races the caller's signal, so a wait timeout or an
   * abort also bounds an etcd that does not answer). `retryOnNewSession`: etcd may have dropped
   * the session before this process noticed, and the put then fails ("lease not found"); an
   * acquisition that was not queued yet queues once more, on a new session.
   */
  private async queue(request: AcquireRequest, retryOnNewSession: boolean): Promise<LockGrant> {
    const { key, owner, signal } = request;
    const session = await untilAborted(this.session(), signal);
    signal.throwIfAborted();
    const keys = lockKeys(key, session.leaseId, owner);
    return new Promise<LockGrant>((resolve, reject) => {
      const onAbort = () => acquisition.stop(signal.reason);
      const settle = () => {
        this.waiting.delete(ownId);
        signal.removeEventListener('abort', onAbort);
      };
      const txn = (request: ITxnRequest) => this.txn(session, request);
      const outcome = {
        granted: (revision: bigint, handedOverUntil?: number) => {
          settle();
          resolve(this.hold(key, owner, keys, revision, session, handedOverUntil));
        },
        failed: (error: unknown) => {
          settle();
          if (retryOnNewSession && !acquisition.queued && !session.alive && !signal.aborted && !this.closed) resolve(this.queue(request, false));
          else reject(error);
        },
        cleanup: (revision: bigint | undefined) =>
          revision === undefined ? this.deleteUnsure(keys, session) : void this.deleteKey(keys, revision, session, true).catch(() => undefined),
      };
      const acquisition = new EtcdAcquisition(this.client, session, keys, txn, this.localFollowers, outcome, this.safetyNetMs);
      const ownId = keys.own.toString('latin1');
      this.waiting.set(ownId, acquisition);
      signal.addEventListener('abort', onAbort, { once: true });
      void acquisition.start();
    });
  }

  /** `retryOnNewSession`: as for queue(). */
  private async tryTake(request: Omit<AcquireRequest, 'signal'>, retryOnNewSession: boolean): Promise<LockGrant | null> {
    const { key, owner } = request;
    const session = await this.session();
    const keys = lockKeys(key, session.leaseId, owner);
    let response: ITxnResponse;
    try {
      response = await this.txn(session, tryTakeTxn(keys, session.leaseId));
    } catch (error) {
      this.deleteUnsure(keys, session);
      if (retryOnNewSession && !session.alive && !this.closed) return this.tryTake(request, false);
      throw error;
    }
    return response.succeeded ? this.hold(key, owner, keys, BigInt(response.header.revision), session) : null;
  }

  /**
   * The session keepalive keeps the key itself alive; renewing checks that the key is still ours
   * (same create revision) and the session alive, so the service can extend its local deadline.
   */
  async renew(grant: LockGrant): Promise<boolean> {
    const held = this.heldFor(grant);
    if (!held || !held.session.alive) return false;
    const response = await this.txn(held.session, ownKeyTxn(held.keys, held.revision));
    if (response.succeeded && held.session.alive) return true;
    this.held.delete(grant.owner);
    if (!response.succeeded) this.localFollowers.gone(held.keys.own, this.waiting.size > 0);
    return false;
  }

  /**
   * One transaction: delete our key if it is still the one we were granted. With `validForMs`
   * (the lease is known valid), the next waiter of this process, if it is right behind, holds the
   * lock at once (LocalFollowers.handOver), and a waiter of this process that the delete's answer
   * shows as the lowest key is granted from that answer. Without it (the lease ran out, or the
   * service is shutting down), nothing is handed over: the follower learns of the deletion when
   * it commits and checks with a read of its own.
   */
  async release(grant: LockGrant, validForMs?: number): Promise<void> {
    const held = this.heldFor(grant);
    if (!held) return;
    this.held.delete(grant.owner);
    if (this.handOvers.size > 0) {
      const nameId = held.keys.start.toString('latin1');
      if (this.handOvers.get(nameId)?.owner === grant.owner) this.handOvers.delete(nameId);
    }
    // A lost session's keys go with its lease.
    if (!held.session.alive) return;
    const leaseValid = validForMs !== undefined;
    if (leaseValid && validForMs >= MIN_HANDOVER_VALIDITY_MS) this.localFollowers.handOver(held.keys.own, performance.now() + validForMs);
    await this.deleteKey(held.keys, held.revision, held.session, leaseValid);
  }

  async close(): Promise<void> {
    if (this.closed) return;
    this.closed = true;
    const waitError = new DistributedLockError('The etcd lock backend was closed while waiting.');
    for (const acquisition of [...this.waiting.values()]) acquisition.stop(waitError);
    const heldError = new DistributedLockError('The etcd lock backend was closed.');
    for (const held of this.held.values()) held.lost.abort(heldError);
    this.held.clear();
    this.handOvers.clear();
    for (const timer of this.retryTimers) clearTimeout(timer);
    this.localFollowers.clear();
    // Revoking the session deletes every key it still has, at once.
    const session = await this.opening?.catch(() => undefined);
    await session?.revoke(CALL_TIMEOUT_MS);
    if (this.ownsClient) this.client.close();
  }

  /** The live session, granted on first use (one round trip) and again after one is lost. */
  private async session(): Promise<EtcdSession> {
    for (let attempt = 0; ; attempt++) {
      if (this.closed) throw new DistributedLockError('The etcd lock backend is closed.');
      this.opening ??= EtcdSession.open(this.client, this.sessionTtlSeconds, this.onSessionLost, this.callOptions()).then(
        (session) => (this.current = session),
        (error) => {
          this.opening = undefined;
          throw error;
        },
      );
      const session = await this.opening;
      if (session.alive) return session;
      if (attempt > 0) throw new LockBackendError('etcd', 'open a session', session.reason);
    }
  }

  /** Every lock and wait on a lost session ends now; the next acquisition opens a new session. */
  private readonly onSessionLost = (session: EtcdSession, reason: Error): void => {
    if (this.current === session) {
      this.current = undefined;
      this.opening = undefined;
    }
    const error = new LockBackendError('etcd', 'keep its session', reason);
    for (const acquisition of [...this.waiting.values()]) if (acquisition.session === session) acquisition.stop(error);
    for (const [owner, held] of this.held) {
      if (held.session !== session) continue;
      this.held.delete(owner);
      held.lost.abort(error);
    }
    for (const [nameId, handOver] of this.handOvers) if (handOver.session === session) this.handOvers.delete(nameId);
    // If the server still has it (we only lost contact), its keys go now rather than at its ttl.
    if (!this.closed) void session.revoke(CALL_TIMEOUT_MS);
  };

  /** The held lock of this very grant: a stale grant of a reused owner id does not match. */
  private heldFor(grant: LockGrant): HeldLock | undefined {
    const held = this.held.get(grant.owner);
    return held?.grant.fencingToken === grant.fencingToken ? held : undefined;
  }

  /** `handedOverUntil`: see AcquisitionOutcome.granted; the grant is then provisional. */
  private hold(key: string, owner: string, keys: LockKeys, revision: bigint, session: EtcdSession, handedOverUntil?: number): LockGrant {
    const lost = new AbortController();
    const provisional = handedOverUntil === undefined ? undefined : { validUntil: handedOverUntil, recorded: this.confirmation(owner, keys, revision, session) };
    const grant: LockGrant = { key, owner, fencingToken: revision, lost: lost.signal, provisional };
    this.held.set(owner, { grant, lost, keys, revision, session });
    // Granted by an answer that raced with the session's loss: report it lost at once.
    if (!session.alive) {
      this.held.delete(owner);
      lost.abort(new LockBackendError('etcd', 'keep its session', session.reason));
    }
    return grant;
  }

  /**
   * The lock was handed to `owner` inside this process (LocalFollowers.handOver): etcd has it
   * once the keys before its own, this process's, are deleted. Resolves with the send time of
   * the delete whose answer shows its key as the lowest (the lease counts from then), or with
   * undefined when an answer shows its key gone; never, when no delete gets through (the
   * holder's lease then ends at the hand-over's `validUntil`).
   */
  private confirmation(owner: string, keys: LockKeys, revision: bigint, session: EtcdSession): Promise<number | undefined> {
    return new Promise((confirm) => this.handOvers.set(keys.start.toString('latin1'), { owner, own: keys.own, revision, session, confirm }));
  }

  /** A delete sent at `sentAt` read `lowest` under the name: settles a hand-over waiting on it. */
  private confirmHandOver(keys: LockKeys, lowest: IKeyValue | undefined, sentAt: number): void {
    if (this.handOvers.size === 0) return; // the common case: no hand-over inside the process
    const nameId = keys.start.toString('latin1');
    const handOver = this.handOvers.get(nameId);
    // A key of ours before the holder's is still being deleted: a later answer will tell.
    if (!handOver || (lowest && createRevision(lowest) < handOver.revision)) return;
    this.handOvers.delete(nameId);
    handOver.confirm(lowest?.key.equals(handOver.own) ? sentAt : undefined);
  }

  /**
   * Deletes a key whose put failed in flight, by name: now, and once more LATE_PUT_MS later, for
   * a put that commits after its call failed. Left alone, such a key of this live session would
   * block the name until the process ends; its deletion wakes a follower of this process too.
   */
  private deleteUnsure(keys: LockKeys, session: EtcdSession): void {
    void this.deleteKey(keys, undefined, session, true).catch(() => undefined);
    this.later(LATE_PUT_MS, () => {
      if (session.alive && !this.closed) void this.deleteKey(keys, undefined, session, true).catch(() => undefined);
    });
  }

  /** Runs `run` after `ms` unless the backend closes first. */
  private later(ms: number, run: () => void): void {
    const timer = setTimeout(() => {
      this.retryTimers.delete(timer);
      run();
    }, ms);
    timer.unref();
    this.retryTimers.add(timer);
  }

  /**
   * Deletes our key; on a network failure keeps retrying in the background while the session
   * lives (its keepalives would keep a forgotten key, and the queue behind it, alive).
   * `grantNext`: a waiter of this process that the answer shows as the lowest key is granted
   * from it; otherwise it learns of the deletion through LocalFollowers.gone, and reads.
   */
  private deleteKey(keys: LockKeys, revision: bigint | undefined, session: EtcdSession, grantNext: boolean, attempt = 0): Promise<void> {
    const sentAt = performance.now();
    return this.txn(session, deleteOwnTxn(keys, revision)).then(
      (response) => {
        const lowest = lowestAfterDelete(response);
        this.confirmHandOver(keys, lowest, sentAt);
        if (lowest && grantNext) this.waiting.get(lowest.key.toString('latin1'))?.grantedByRelease(lowest);
        this.localFollowers.gone(keys.own, this.waiting.size > 0);
      },
      (error) => {
        if (session.alive && !this.closed) {
          this.later(Math.min(2_000, 100 * 2 ** attempt), () => void this.deleteKey(keys, revision, session, grantNext, attempt + 1).catch(() => undefined));
        }
        throw error;
      },
    );
  }

  /** A user's client has no per-attempt deadlines of ours: each call on it gets CALL_TIMEOUT_MS in all. */
  private callOptions(): { deadline: number } | undefined {
    return this.ownsClient ? undefined : { deadline: Date.now() + CALL_TIMEOUT_MS };
  }

  private txn(session: EtcdSession, request: ITxnRequest): Promise<ITxnResponse> {
    return this.client.kv.txn(request, this.callOptions()).catch((error: Error) => {
      if (/lease not found|expired or revoked/i.test(error.message)) session.end(error);
      throw error;
    });
  }
}

/** Validates before any I/O, then loads etcd3 (only now: it is an optional peer). */
export function createEtcdBackend(options: EtcdBackendOptions, _settings?: BackendSettings): EtcdLockBackend {
  validateEtcdOptions(options);
  if (options.client) return new EtcdLockBackend(options.client as unknown as Etcd3, false, sessionTtlSeconds(options.sessionTtlMs));
  const { Etcd3: Client } = loadPeer<typeof import('etcd3')>('etcd3', 'etcd');
  const client = new Client({
    hosts: options.hosts ?? DEFAULT_ETCD_HOSTS,
    auth: options.auth,
    credentials: options.credentials,
    defaultCallOptions: (context) => (context.isStream ? {} : { deadline: Date.now() + ATTEMPT_TIMEOUT_MS }),
  });
  return new EtcdLockBackend(client, true, sessionTtlSeconds(options.sessionTtlMs));
}
