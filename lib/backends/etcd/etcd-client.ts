import type { Etcd3 } from 'etcd3';
import { loadPeer } from '../load-peer';
import type { EtcdBackendOptions } from './etcd-options';

/** Attempts per call, each on a member etcd3 picks anew (its default retries 3 times: 4 attempts). */
export const ATTEMPTS = 3;

type Attempt<T> = (context: { signal: AbortSignal; attempt: number }) => PromiseLike<T> | T;

/**
 * The signal every attempt gets: cockatiel's policies hand one to the call, and etcd3 never reads
 * it, so one signal that never aborts serves all (an AbortSignal per attempt cost a cycle 2-3%).
 */
const NEVER_ABORTED = new AbortController().signal;

/** cockatiel's IPolicy as etcd3 calls it (execute only): the call once, as is. */
const noPolicy = {
  execute: <T>(fn: Attempt<T>) => Promise.resolve().then(() => fn({ signal: NEVER_ABORTED, attempt: 1 })),
} as never;

/** The same, trying again (on another member) after a transport failure, ATTEMPTS in all. */
function retryPolicy(isRecoverable: (error: Error) => boolean) {
  return {
    async execute<T>(fn: Attempt<T>): Promise<T> {
      for (let attempt = 1; ; attempt++) {
        try {
          return await fn({ signal: NEVER_ABORTED, attempt });
        } catch (error) {
          if (attempt >= ATTEMPTS || !(error instanceof Error) || !isRecoverable(error)) throw error;
        }
      }
    },
  } as never;
}

/**
 * The backend's own client, loading etcd3 only now (an optional peer). Each attempt gets
 * `attemptTimeoutMs`, and a failed attempt is tried again on another member (ATTEMPTS in all), so
 * a dead member costs one attempt and a call at most ATTEMPTS x attemptTimeoutMs. No circuit breaker: calls are already bounded (in flight, per attempt), and
 * etcd3's default breaker, tripped by a burst of timeouts, fails every call for 5 s with wording
 * that names no server.
 */
export function createEtcdClient(options: EtcdBackendOptions, hosts: string | string[], attemptTimeoutMs: number): Etcd3 {
  const etcd3 = loadPeer<typeof import('etcd3')>('etcd3', 'etcd');
  return new etcd3.Etcd3({
    hosts,
    auth: options.auth,
    credentials: options.credentials,
    defaultCallOptions: (context) => (context.isStream ? {} : { deadline: Date.now() + attemptTimeoutMs }),
    faultHandling: { host: () => noPolicy, global: retryPolicy(etcd3.isRecoverableError) },
    // gRPC backs off reconnects up to 120 s by default: a server that comes back would wait that
    // long to be used. Retry at least every attempt timeout instead.
    grpcOptions: {
      'grpc.initial_reconnect_backoff_ms': Math.min(250, attemptTimeoutMs),
      'grpc.max_reconnect_backoff_ms': Math.max(250, attemptTimeoutMs),
    },
  });
}

/** The hosts of a user's client, read from etcd3's connection pool when it has the shape we know. */
export function suppliedClientAddress(client: unknown): string {
  const hosts = (client as { pool?: { hosts?: Array<{ host?: unknown }> } }).pool?.hosts?.map((host) => host.host);
  return hosts?.length && hosts.every((host) => typeof host === 'string') ? hosts.join(',') : 'the supplied etcd3 client';
}
