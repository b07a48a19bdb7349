import type { Etcd3, ITxnRequest, ITxnResponse } from 'etcd3';
import { LockBackendError, LockServerUnreachableError } from '../../errors';
import { explainTlsError, moreTellingTlsError } from '../tls-errors';

/**
 * Requests of one backend at etcd at once. A burst of a thousand acquisitions of distinct names
 * sent at once makes etcd answer "request timed out" and etcd3 then resets the connection under
 * every other call (measured: 77 of 1000 failed); queued here, they go through in turn.
 */
export const MAX_IN_FLIGHT = 64;

const TLS_OPTIONS = { trust: 'backend.credentials.rootCertificate', clientCertificate: 'backend.credentials.certChain and backend.credentials.privateKey' };

/** etcd3's errors that mean the server could not be reached, or did not answer in time. */
function isTransportError(error: unknown): boolean {
  if (!(error instanceof Error)) return false;
  if (error.name === 'BrokenCircuitError' || error.name === 'TaskCancelledError') return true;
  return /^GRPC(Unavailable|DeadlineExceeded|Cancelled|ConnectFailed)Error$/.test(error.constructor.name) || /UNAVAILABLE|DEADLINE_EXCEEDED/.test(error.message);
}

/**
 * Every transaction of one backend: bounded in flight (MAX_IN_FLIGHT), bounded in time, and
 * wrapped once: a transport failure becomes LockServerUnreachableError naming the hosts, any
 * other a LockBackendError, with etcd3's error as `cause`. Also answers `unreachable()`, from
 * what the newest calls and keepalives saw.
 */
export class EtcdCalls {
  private inFlight = 0;
  private readonly queued: Array<() => void> = [];
  /** Start times of calls at etcd, oldest first. */
  private readonly pending = new Map<number, number>();
  private nextId = 0;
  private lastFailure?: Error;
  private lastAnswerAt = performance.now();

  constructor(
    private readonly client: Etcd3,
    readonly address: string,
    /** How long one attempt may go unanswered before the server counts as unreachable. */
    private readonly attemptTimeoutMs: number,
    /** For a user's client, which has no per-attempt deadlines of ours: each call's own. */
    private readonly callTimeoutMs: number | undefined,
    /** https hosts or TLS credentials: a failed handshake is explained (explainTlsError). */
    private readonly usesTls = false,
  ) {}

  /**
   * The server's last word was a transport failure, or a call has gone unanswered longer than
   * an attempt may take with no answer to anything meanwhile (a slow but working etcd answers
   * something).
   */
  unreachable(): Error | undefined {
    if (this.lastFailure) return this.lastFailure;
    const oldest = this.pending.values().next();
    const now = performance.now();
    if (!oldest.done && now - oldest.value > this.attemptTimeoutMs && now - this.lastAnswerAt > this.attemptTimeoutMs) {
      return new Error(`no answer from etcd for ${Math.round(now - Math.max(oldest.value, this.lastAnswerAt))} ms`);
    }
    return undefined;
  }

  /** etcd answered (a call, a keepalive): it is reachable. */
  reached(): void {
    this.lastFailure = undefined;
    this.lastAnswerAt = performance.now();
  }

  /** A call or keepalive failed: remembered when it says the server cannot be reached. */
  failed(error: unknown): void {
    if (isTransportError(error)) this.lastFailure = this.explained(error as Error);
  }

  /**
   * gRPC reports a refused handshake inside its "No connection established" (a reset there came
   * before any answer): say what it means. Until etcd answers again, a TLS failure stays the
   * reason over gRPC's later retellings, which may have lost it ("Last error: null").
   */
  private explained(error: Error): Error {
    if (!this.usesTls) return error;
    const explained = explainTlsError(error, TLS_OPTIONS, /No connection established/.test(error.message));
    return moreTellingTlsError(this.lastFailure, explained, true);
  }

  /** Counts `call` as a call at etcd for `unreachable()`, until it settles. */
  track<T>(call: Promise<T>): Promise<T> {
    const id = this.nextId++;
    this.pending.set(id, performance.now());
    return call.finally(() => this.pending.delete(id));
  }

  /**
   * A call that had to wait for its turn is not sent when etcd turned out unreachable meanwhile:
   * it fails at once rather than queueing behind a dead server. (Not on waiting alone: a burst
   * waits its turn while etcd answers.)
   */
  txn(operation: string, request: ITxnRequest): Promise<ITxnResponse> {
    return this.call(operation, (options) => this.client.kv.txn(request, options));
  }

  /** Any other unary call (`send` given the call's options), bounded and wrapped as txn() is. */
  async call<T>(operation: string, send: (options: { deadline: number } | undefined) => Promise<T>): Promise<T> {
    const startedAt = performance.now();
    if (this.inFlight < MAX_IN_FLIGHT) this.inFlight++;
    else {
      // The slot is handed over by the call that frees it (releaseSlot).
      await new Promise<void>((resolve) => this.queued.push(resolve));
      const waitedMs = performance.now() - startedAt;
      if (this.lastFailure) {
        this.releaseSlot();
        throw new LockServerUnreachableError('etcd', operation, this.address, Math.round(waitedMs), this.lastFailure);
      }
    }
    const id = this.nextId++;
    this.pending.set(id, performance.now());
    try {
      const options = this.callTimeoutMs === undefined ? undefined : { deadline: Date.now() + this.callTimeoutMs };
      const response = await send(options);
      this.reached();
      return response;
    } catch (error) {
      throw this.wrap(operation, error, startedAt);
    } finally {
      this.pending.delete(id);
      this.releaseSlot();
    }
  }

  /**
   * One cheap round trip, for health checks: a member's status (it needs no permission on any
   * key, so an RBAC user limited to the lock prefix may ask), refused when the member knows of no
   * leader, since no lock can then be taken.
   */
  async ping(): Promise<void> {
    const startedAt = performance.now();
    try {
      const options = this.callTimeoutMs === undefined ? undefined : { deadline: Date.now() + this.callTimeoutMs };
      const status = await this.track(this.client.maintenance.status(options));
      this.reached();
      if (status.leader === '0') throw new LockBackendError('etcd', 'answer a status request', new Error('the member answered, but it has no leader'), this.address);
    } catch (error) {
      throw this.wrap('answer a status request', error, startedAt);
    }
  }

  private releaseSlot(): void {
    const next = this.queued.shift();
    if (next) next();
    else this.inFlight--;
  }

  /** etcd3's error as this library's, naming the hosts; counts it for `unreachable()`. */
  wrap(operation: string, error: unknown, startedAt: number): LockBackendError {
    if (error instanceof LockBackendError) return error;
    this.failed(error);
    if (isTransportError(error)) return new LockServerUnreachableError('etcd', operation, this.address, Math.round(performance.now() - startedAt), this.explained(error as Error));
    return new LockBackendError('etcd', operation, error, this.address);
  }
}
