import type { Etcd3, ITxnRequest, ITxnResponse } from 'etcd3';
import { LockBackendError } from '../../errors';
import { BoundedCalls } from '../bounded-calls';
import { explainTlsError, moreTellingTlsError } from '../tls-errors';

/**
 * Requests of one backend at etcd at once: a burst of distinct names sent all at once makes etcd
 * answer "request timed out", and etcd3 then resets the connection under the other calls
 * (docs/etcd.md, "In number"); queued here, they go through in turn.
 */
export const MAX_IN_FLIGHT = 64;

const TLS_OPTIONS = { trust: 'backend.credentials.rootCertificate', clientCertificate: 'backend.credentials.certChain and backend.credentials.privateKey' };

/**
 * Every transaction of one backend, through BoundedCalls (bounded in flight, wrapped once with
 * etcd3's error as `cause`); each attempt is bounded in time by etcd3's deadlines. Also answers
 * `unreachable()`, from what the newest calls and keepalives saw.
 */
export class EtcdCalls extends BoundedCalls {
  constructor(
    private readonly client: Etcd3,
    address: string,
    /** How long one attempt may go unanswered before the server counts as unreachable. */
    attemptTimeoutMs: number,
    /** For a user's client, which has no per-attempt deadlines of ours: each call's own. */
    private readonly callTimeoutMs: number | undefined,
    /** https hosts or TLS credentials: a failed handshake is explained (explainTlsError). */
    private readonly usesTls = false,
  ) {
    super('etcd', 'etcd', address, MAX_IN_FLIGHT, attemptTimeoutMs);
  }

  /** etcd3's errors that mean the server could not be reached, or did not answer in time. */
  protected isTransportError(error: unknown): boolean {
    if (!(error instanceof Error)) return false;
    if (error.name === 'BrokenCircuitError' || error.name === 'TaskCancelledError') return true;
    return /^GRPC(Unavailable|DeadlineExceeded|Cancelled|ConnectFailed)Error$/.test(error.constructor.name) || /UNAVAILABLE|DEADLINE_EXCEEDED/.test(error.message);
  }

  /**
   * gRPC reports a refused handshake inside its "No connection established" (a reset there came
   * before any answer): say what it means. Until etcd answers again, a TLS failure stays the
   * reason over gRPC's later retellings, which may have lost it ("Last error: null").
   */
  protected override kept(error: Error, keptBefore: Error | undefined): Error {
    if (!this.usesTls) return error;
    return moreTellingTlsError(keptBefore, explainTlsError(error, TLS_OPTIONS, /No connection established/.test(error.message)), true);
  }

  txn(operation: string, request: ITxnRequest): Promise<ITxnResponse> {
    return this.call(operation, (options) => this.client.kv.txn(request, options));
  }

  /** Any other unary call (`send` given the call's options), bounded and wrapped as txn() is. */
  call<T>(operation: string, send: (options: { deadline: number } | undefined) => Promise<T>): Promise<T> {
    return this.bounded(operation, () => send(this.callOptions()));
  }

  /**
   * One cheap round trip, for health checks: a member's status (it needs no permission on any
   * key, so an RBAC user limited to the lock prefix may ask), refused when the member knows of no
   * leader, since no lock can then be taken.
   */
  async ping(): Promise<void> {
    const startedAt = performance.now();
    try {
      const status = await this.track(this.client.maintenance.status(this.callOptions()));
      this.reached();
      if (status.leader === '0') throw new LockBackendError('etcd', 'answer a status request', new Error('the member answered, but it has no leader'), this.address);
    } catch (error) {
      throw this.wrap('answer a status request', error, startedAt);
    }
  }

  private callOptions(): { deadline: number } | undefined {
    return this.callTimeoutMs === undefined ? undefined : { deadline: Date.now() + this.callTimeoutMs };
  }
}
