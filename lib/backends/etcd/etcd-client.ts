import type { Etcd3 } from 'etcd3';
import { loadPeer } from '../load-peer';
import type { EtcdBackendOptions } from './etcd-options';

/** cockatiel's IPolicy as etcd3 calls it (execute only): runs the call once, as is. */
const noPolicy = {
  execute: <T>(fn: (context: { signal: AbortSignal }) => PromiseLike<T> | T) => Promise.resolve().then(() => fn({ signal: new AbortController().signal })),
} as never;

/**
 * The backend's own client, loading etcd3 only now (an optional peer). Each attempt gets
 * `attemptTimeoutMs`; etcd3 retries a failed attempt on another member (3 attempts), so a dead
 * member costs one. No circuit breaker: calls are already bounded (in flight, per attempt), and
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
    faultHandling: { host: () => noPolicy },
  });
}

/** The hosts of a user's client, read from etcd3's connection pool when it has the shape we know. */
export function suppliedClientAddress(client: unknown): string {
  const hosts = (client as { pool?: { hosts?: Array<{ host?: unknown }> } }).pool?.hosts?.map((host) => host.host);
  return hosts?.length && hosts.every((host) => typeof host === 'string') ? hosts.join(',') : 'the supplied etcd3 client';
}
