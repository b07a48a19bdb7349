import type { Etcd3 } from 'etcd3';
import { decodeLockResponse, encodeLockRequest, type LockRequest, type LockResponse } from './lock-messages';

const LOCK_METHOD = '/v3lockpb.Lock/Lock';

/** The parts of a gRPC client (grpc-js, as etcd3 holds it) that one unary call needs. */
interface UnaryClient {
  makeUnaryRequest(
    method: string,
    serialize: (request: LockRequest) => Buffer,
    deserialize: (bytes: Buffer) => LockResponse,
    argument: LockRequest,
    metadata: unknown,
    options: object,
    callback: (error: Error | null, response?: LockResponse) => void,
  ): { cancel(): void };
}

/** etcd3's connection pool, which the Etcd3 type keeps private: a member's channel with the client's TLS and auth token. */
interface ConnectionPool {
  withConnection<T>(service: 'KV', fn: (connection: { client: UnaryClient; metadata: unknown }) => Promise<T>): Promise<T>;
}

/** One Lock call at the server: its answer, and how to give it up. */
export interface LockRpc {
  readonly answer: Promise<LockResponse>;
  /** Cancels the call: the server's wait ends (its Mutex deletes its key when the wait was cut short). */
  cancel(): void;
}

/**
 * Calls etcd's Lock service on a member etcd3 picks, over etcd3's own channel to it: the hosts,
 * TLS credentials and auth token of the backend's client, and no second connection. No deadline:
 * the call lasts as long as the server's wait, and the backend cancels it when its callers stop
 * waiting. etcd3's errors come back as its typed errors (castGrpcError).
 */
export function callLock(client: Etcd3, request: LockRequest): LockRpc {
  const pool = (client as unknown as { pool: ConnectionPool }).pool;
  let cancelled = false;
  let call: { cancel(): void } | undefined;
  const answer = pool.withConnection('KV', ({ client: channel, metadata }) => {
    if (cancelled) return Promise.reject(new Error('the Lock call was cancelled before it was sent'));
    return new Promise<LockResponse>((resolve, reject) => {
      call = channel.makeUnaryRequest(LOCK_METHOD, encodeLockRequest, decodeLockResponse, request, metadata, {}, (error, response) =>
        error ? reject(error) : resolve(response!),
      );
    });
  });
  return {
    answer,
    cancel: () => {
      cancelled = true;
      call?.cancel();
    },
  };
}
