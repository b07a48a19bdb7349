import type { Etcd3, ITxnRequest, ITxnResponse } from 'etcd3';
import { LockBackendError, LockServerUnreachableError } from '../../../errors';
import type { EntryWait } from '../etcd-batch';
import type { EtcdCalls } from '../etcd-calls';
import type { LockKeys } from '../etcd-keys';
import { enqueueTxn, heldCheckTxn, heldRevision, rangeKvs } from '../etcd-requests';
import type { EtcdSession } from '../etcd-session';
import type { LockResponse } from './lock-messages';
import { callLock, type LockRpc } from './lock-rpc';

/** What every entry of one backend shares. */
export interface LockApiContext {
  readonly client: Etcd3;
  readonly calls: EtcdCalls;
  /**
   * A Lock call unanswered this long is backed by a read of our key (a probe): the server waits
   * without a word, so only a read tells a waiting entry from a server that cannot answer.
   */
  readonly probeAfterMs: number;
  /** Then again every this long while the call waits (watchSafetyNetMs of the sessions). */
  readonly safetyNetMs: number;
  /** A transaction with the backend's deadline and lease-loss detection. */
  txn(session: EtcdSession, request: ITxnRequest): Promise<ITxnResponse>;
}

/** How the entry tells the backend how it ended. */
export interface LockApiOutcome {
  /** Our key is at etcd behind another: the entry waits in the server's queue. */
  queued(): void;
  /** Our key holds (ours, the lowest under the name), with this create revision. */
  granted(revision: bigint): void;
  /** Gave up or failed; `queued`: our key had been put (else a lost session may be worth a retry on the next). */
  failed(error: unknown, queued: boolean): void;
  /** After a failure, once our requests are over: delete our key when it `mayExist`, then pass the key's turn on. */
  cleanup(mayExist: boolean): void;
}

/**
 * One entry in the queue of etcd's Lock service. The service's concurrency.Mutex first puts
 * `<name>/<lease hex>` if absent and reads the owner, in one transaction; we send that very
 * transaction ourselves, so a free lock costs one round trip and its key's create revision is
 * known at once. Only when another key is ahead does the Lock call go out: the server's Mutex
 * finds our key, keeps its place, and answers once every older key is gone. Its answer is
 * checked before the lock is reported held: a 3.4 server answers even when our key was deleted
 * during its wait (etcd-io/etcd#11456), and the fencing token is the key's create revision, which
 * the answer does not carry. Giving up cancels the call; the server's Mutex then deletes the key,
 * and the backend deletes it too (cleanup), as a cancel can reach the server after its put.
 */
export class LockApiCall implements EntryWait {
  private state: 'idle' | 'putting' | 'calling' | 'checking' | 'granted' | 'failed' = 'idle';
  /** The request now at etcd: a cleanup goes only after it settled, never ahead of our own put. */
  private inFlight?: Promise<unknown>;
  private rpc?: LockRpc;
  private probeTimer?: NodeJS.Timeout;

  constructor(
    private readonly context: LockApiContext,
    readonly session: EtcdSession,
    readonly keys: LockKeys,
    private readonly outcome: LockApiOutcome,
  ) {}

  /** Puts our key, once its turn has come (KeyTurns). An entry stopped before does nothing. */
  start(): void {
    if (this.state !== 'idle') return;
    this.state = 'putting';
    const put = this.context.txn(this.session, enqueueTxn(this.keys, this.session.leaseId));
    this.inFlight = put;
    put.then(
      (response) => this.put(response),
      (error: Error) => this.state === 'putting' && this.fail(error),
    );
  }

  /** Gives up (every caller left, the session was lost, the backend closes). */
  stop(reason: unknown): void {
    this.fail(reason);
  }

  /** The Mutex's first step answered: ours holds when no key is ahead; else the server waits for us. */
  private put(response: ITxnResponse): void {
    if (this.state !== 'putting') return;
    // Not put: a key of ours left by an abandoned call is there, and the Mutex takes it over.
    if (response.succeeded && rangeKvs(response, 1).every((kv) => kv.key.equals(this.keys.own))) return this.grant(BigInt(response.header.revision));
    this.outcome.queued();
    this.call();
  }

  private call(): void {
    this.state = 'calling';
    const startedAt = performance.now();
    const rpc = callLock(this.context.client, { name: this.keys.start.subarray(0, -1), lease: this.session.leaseId });
    this.rpc = rpc;
    this.inFlight = rpc.answer;
    this.probeIn(this.context.probeAfterMs);
    rpc.answer.then(
      (response) => this.answered(response),
      (error: Error) => {
        if (this.state !== 'calling') return;
        const wrapped = this.context.calls.wrap('queue for a lock', error, startedAt);
        if (/lease not found|expired or revoked/i.test(error.message)) this.session.end(error);
        this.fail(wrapped);
      },
    );
  }

  private answered(response: LockResponse): void {
    if (this.state !== 'calling') return;
    this.context.calls.reached();
    this.state = 'checking';
    clearTimeout(this.probeTimer);
    if (!response.key.equals(this.keys.own)) {
      return this.fail(this.error(`etcd's Lock service answered with the key "${response.key.toString('latin1')}", not ours`));
    }
    const check = this.context.txn(this.session, heldCheckTxn(this.keys));
    this.inFlight = check;
    check.then(
      (read) => {
        if (this.state !== 'checking') return;
        const verdict = heldRevision(read, this.session.leaseId);
        if (typeof verdict === 'bigint') return this.grant(verdict);
        this.fail(this.error(EXPLAINED[verdict]), verdict === 'not first');
      },
      (error) => this.fail(error),
    );
  }

  private grant(revision: bigint): void {
    if (!this.session.alive) return this.fail(this.session.reason);
    this.state = 'granted';
    this.outcome.granted(revision);
  }

  /** A read of our key while the call waits: etcd unreachable ends the wait, as any unanswered call does. */
  private probeIn(ms: number): void {
    this.probeTimer = setTimeout(() => {
      if (this.state !== 'calling') return;
      this.context.txn(this.session, heldCheckTxn(this.keys)).then(
        () => this.state === 'calling' && this.probeIn(this.context.safetyNetMs),
        (error) => {
          if (this.state !== 'calling') return;
          if (error instanceof LockServerUnreachableError) return this.fail(error);
          this.probeIn(this.context.safetyNetMs);
        },
      );
    }, ms);
    this.probeTimer.unref();
  }

  /** `mayExist`: our key may be at etcd and must be deleted; false once a read showed it gone or someone else's. */
  private fail(error: unknown, mayExist = true): void {
    if (this.state === 'granted' || this.state === 'failed') return;
    const sent = this.state !== 'idle';
    const queued = sent && this.state !== 'putting';
    this.state = 'failed';
    clearTimeout(this.probeTimer);
    this.rpc?.cancel();
    this.outcome.failed(error, queued);
    if (!sent) return this.outcome.cleanup(false);
    // A cancelled call settles at once; a put settles within its deadline.
    void this.inFlight!.catch(() => undefined).then(() => this.outcome.cleanup(mayExist));
  }

  private error(why: string): LockBackendError {
    return new LockBackendError('etcd', 'queue for a lock', new Error(why), this.context.calls.address);
  }
}

const EXPLAINED = {
  gone: "etcd's Lock service answered, but our key was deleted while it waited (its session lease ended, or it was removed): etcd 3.4 does not check (etcd-io/etcd#11456)",
  'not ours': "etcd's Lock service answered, but our key now belongs to another lease",
  'not first': "etcd's Lock service answered, but another key now precedes ours",
} as const;
