import { monitorEventLoopDelay } from 'node:perf_hooks';
import { after, afterEach, before } from 'node:test';
import { Etcd3, type ITxnRequest } from 'etcd3';
import type { AcquireRequest, LockBackend } from '../../../lib';
import { createEtcdBackend, type EtcdLockBackend } from '../../../lib/backends/etcd/etcd.backend';
import { EtcdCluster } from '../../../servers/etcd-server';

/** Helpers shared by the etcd backend tests. */

/** A backend request with a lease long enough never to matter, and a signal of its own (as LockService gives each call). */
export function request(key: string, owner: string, signal: AbortSignal = new AbortController().signal): AcquireRequest {
  return { key, owner, ttlMs: 30_000, signal };
}

/** `promise`, or a failure naming `what` after `ms`: a stuck queue fails the test, not hangs it. */
export function within<T>(promise: Promise<T>, ms: number, what: string): Promise<T> {
  let timer: NodeJS.Timeout;
  const timeout = new Promise<never>((_, reject) => (timer = setTimeout(() => reject(new Error(`${what}: nothing after ${ms} ms`)), ms)));
  return Promise.race([promise, timeout]).finally(() => clearTimeout(timer));
}

/** What a transaction of the backend does: put (enqueue, try-lock), delete (release, leave) or read. */
export function txnKind(request: ITxnRequest): 'put' | 'delete' | 'read' {
  const ops = [...(request.success ?? []), ...(request.failure ?? [])];
  if (ops.some((op) => op.request_put)) return 'put';
  return ops.some((op) => op.request_delete_range) ? 'delete' : 'read';
}

/**
 * Measures how late this process's timers ran (the longest event-loop delay, sampled every 10 ms)
 * from now until `stop()`. On the shared 2-core test machine a timer can fire a few hundred ms
 * late; a bound on when a timer-driven signal fires is asserted as the property's own bound plus
 * this measured lateness, so it holds under load and still fails when the property breaks (a
 * signal a whole ttl late, say).
 */
export function timerLateness(): { stop(): number } {
  const histogram = monitorEventLoopDelay({ resolution: 10 });
  histogram.enable();
  return {
    stop() {
      histogram.disable();
      return Math.ceil(histogram.max / 1e6);
    },
  };
}

/** A throwaway etcd for one describe block, and what its tests opened, closed after each test. */
export interface EtcdFixture {
  readonly cluster: EtcdCluster;
  /** A client of the test's own, to read and change what the backends wrote. */
  readonly admin: Etcd3;
  /** Backends a test made: closed after it. */
  readonly backends: LockBackend[];
  /** Clients a test made: closed after it. */
  readonly clients: Etcd3[];
  /** The session lease of the lock held on `key`, read from etcd. */
  leaseOf(key: string): Promise<string>;
  /** A backend on the cluster, or on `client`: closed after the test. */
  backend(options?: { sessionTtlMs?: number; client?: Etcd3 }): EtcdLockBackend;
  /** A client of the cluster: closed after the test. */
  client(): Etcd3;
}

/** Registers the hooks of an EtcdFixture in the calling describe block. */
export function etcdFixture(members = 1): EtcdFixture {
  let cluster: EtcdCluster | undefined;
  let admin: Etcd3 | undefined;
  const fixture: EtcdFixture = {
    get cluster() {
      return cluster!;
    },
    get admin() {
      return admin!;
    },
    backends: [],
    clients: [],
    leaseOf: async (key) => (await admin!.getAll().prefix(`${key}/`).exec()).kvs[0].lease,
    backend(options = {}) {
      const created = createEtcdBackend({ type: 'etcd', ...(options.client ? { client: options.client } : { hosts: cluster!.hosts }), sessionTtlMs: options.sessionTtlMs });
      fixture.backends.push(created);
      return created;
    },
    client() {
      const created = new Etcd3({ hosts: cluster!.hosts });
      fixture.clients.push(created);
      return created;
    },
  };
  before(async () => {
    cluster = await EtcdCluster.start(members);
    admin = new Etcd3({ hosts: cluster.hosts });
  });
  afterEach(async () => {
    await Promise.all(fixture.backends.splice(0).map((backend) => backend.close()));
    for (const client of fixture.clients.splice(0)) client.close();
  });
  after(async () => {
    admin?.close();
    await cluster?.stop();
  });
  return fixture;
}
