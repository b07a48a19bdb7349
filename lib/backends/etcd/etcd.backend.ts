import type { Etcd3, ITxnRequest, ITxnResponse } from 'etcd3';
import { DistributedLockError, LockBackendError } from '../../errors';
import type { AcquireRequest, LockBackend, LockGrant } from '../lock-backend.interface';
import { loadPeer } from '../load-peer';
import { EtcdAcquisition } from './etcd-acquisition';
import { lockKeys, type LockKeys } from './etcd-keys';
import { DEFAULT_ETCD_HOSTS, sessionTtlSeconds, validateEtcdOptions, type EtcdBackendOptions } from './etcd-options';
import { deleteOwnTxn, ownKeyTxn, rangeKvs, tryTakeTxn } from './etcd-requests';
import { EtcdSession } from './etcd-session';
import { LocalFollowers } from './local-followers';

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

interface HeldLock {
  readonly grant: LockGrant;
  readonly lost: AbortController;
  readonly keys: LockKeys;
  readonly revision: bigint;
  readonly session: EtcdSession;
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
  private readonly retryTimers = new Set<NodeJS.Timeout>();
  private readonly localFollowers = new LocalFollowers(2 * CALL_TIMEOUT_MS);
  private closed = false;

  constructor(
    private readonly client: Etcd3,
    /** False for a user-supplied client: it is never closed here. */
    private readonly ownsClient: boolean,
    private readonly sessionTtlSeconds: number,
  ) {}

  async acquire({ key, owner, signal }: AcquireRequest): Promise<LockGrant> {
    signal.throwIfAborted();
    const session = await this.session();
    signal.throwIfAborted();
    const keys = lockKeys(key, session.leaseId, owner);
    return new Promise<LockGrant>((resolve, reject) => {
      const onAbort = () => acquisition.stop(signal.reason);
      const settle = () => {
        this.waiting.delete(ownId);
        signal.removeEventListener('abort', onAbort);
      };
      const txn = (request: ITxnRequest) => this.txn(session, request);
      const acquisition: EtcdAcquisition = new EtcdAcquisition(this.client, session, keys, txn, this.localFollowers, {
        granted: (revision) => {
          settle();
          resolve(this.hold(key, owner, keys, revision, session));
        },
        failed: (error) => {
          settle();
          reject(error);
        },
        cleanup: (revision) => void this.deleteKey(keys, revision, session).catch(() => undefined),
      });
      const ownId = keys.own.toString('latin1');
      this.waiting.set(ownId, acquisition);
      signal.addEventListener('abort', onAbort, { once: true });
      void acquisition.start();
    });
  }

  /** One transaction: put our key only if no key exists under the name. */
  async tryAcquire({ key, owner }: Omit<AcquireRequest, 'signal'>): Promise<LockGrant | null> {
    const session = await this.session();
    const keys = lockKeys(key, session.leaseId, owner);
    let response: ITxnResponse;
    try {
      response = await this.txn(session, tryTakeTxn(keys, session.leaseId));
    } catch (error) {
      void this.deleteKey(keys, undefined, session).catch(() => undefined);
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

  /** One transaction: delete our key if it is still the one we were granted. */
  async release(grant: LockGrant): Promise<void> {
    const held = this.heldFor(grant);
    if (!held) return;
    this.held.delete(grant.owner);
    // A lost session's keys go with its lease.
    if (!held.session.alive) return;
    this.localFollowers.handOver(held.keys.own);
    await this.deleteKey(held.keys, held.revision, held.session);
  }

  async close(): Promise<void> {
    if (this.closed) return;
    this.closed = true;
    const waitError = new DistributedLockError('The etcd lock backend was closed while waiting.');
    for (const acquisition of [...this.waiting.values()]) acquisition.stop(waitError);
    const heldError = new DistributedLockError('The etcd lock backend was closed.');
    for (const held of this.held.values()) held.lost.abort(heldError);
    this.held.clear();
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
      this.opening ??= EtcdSession.open(this.client, this.sessionTtlSeconds, this.onSessionLost).then(
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
    // If the server still has it (we only lost contact), its keys go now rather than at its ttl.
    if (!this.closed) void session.revoke(CALL_TIMEOUT_MS);
  };

  /** The held lock of this very grant: a stale grant of a reused owner id does not match. */
  private heldFor(grant: LockGrant): HeldLock | undefined {
    const held = this.held.get(grant.owner);
    return held?.grant.fencingToken === grant.fencingToken ? held : undefined;
  }

  private hold(key: string, owner: string, keys: LockKeys, revision: bigint, session: EtcdSession): LockGrant {
    const lost = new AbortController();
    const grant: LockGrant = { key, owner, fencingToken: revision, lost: lost.signal };
    this.held.set(owner, { grant, lost, keys, revision, session });
    // Granted by an answer that raced with the session's loss: report it lost at once.
    if (!session.alive) {
      this.held.delete(owner);
      lost.abort(new LockBackendError('etcd', 'keep its session', session.reason));
    }
    return grant;
  }

  /**
   * Deletes our key; on a network failure keeps retrying in the background while the session
   * lives (its keepalives would keep a forgotten key, and the queue behind it, alive).
   */
  private deleteKey(keys: LockKeys, revision: bigint | undefined, session: EtcdSession, attempt = 0): Promise<void> {
    return this.txn(session, deleteOwnTxn(keys, revision)).then(
      (response) => {
        const next = response.succeeded ? rangeKvs(response, 1)[0] : undefined;
        if (next) this.waiting.get(next.key.toString('latin1'))?.grantedByRelease(next);
        this.localFollowers.gone(keys.own, this.waiting.size > 0);
      },
      (error) => {
        if (session.alive && !this.closed) {
          const timer = setTimeout(() => {
            this.retryTimers.delete(timer);
            void this.deleteKey(keys, revision, session, attempt + 1).catch(() => undefined);
          }, Math.min(2_000, 100 * 2 ** attempt));
          timer.unref();
          this.retryTimers.add(timer);
        }
        throw error;
      },
    );
  }

  private txn(session: EtcdSession, request: ITxnRequest): Promise<ITxnResponse> {
    const options = this.ownsClient ? undefined : { deadline: Date.now() + CALL_TIMEOUT_MS };
    return this.client.kv.txn(request, options).catch((error: Error) => {
      if (/lease not found|expired or revoked/i.test(error.message)) session.end(error);
      throw error;
    });
  }
}

/** Validates before any I/O, then loads etcd3 (only now: it is an optional peer). */
export function createEtcdBackend(options: EtcdBackendOptions): EtcdLockBackend {
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
