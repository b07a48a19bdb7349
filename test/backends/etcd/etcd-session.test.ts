import assert from 'node:assert/strict';
import { createServer, type Server, type Socket } from 'node:net';
import { after, before, describe, it } from 'node:test';
import { Etcd3 } from 'etcd3';
import { LockServerUnreachableError } from '../../../lib';
import { createEtcdBackend } from '../../../lib/backends/etcd/etcd.backend';
import { freePort } from '../../../servers/free-port';
import { lockServiceOver } from '../../support/lock-service-factory';
import { etcdFixture, request, within } from './etcd-test-kit';

describe('etcd backend: the session lease', () => {
  const etcd = etcdFixture();
  let seq = 0;
  const newKey = () => `etcd-session-${process.pid}-${++seq}`;


  it('opens one lease per process, and exactly one more when etcd dropped it before the process noticed', async () => {
    const client = etcd.client();
    let leases = 0;
    const lease = client.lease.bind(client);
    client.lease = (ttl, options) => {
      leases++;
      return lease(ttl, options);
    };
    // 30 s: the next keepalive is 10 s away, so nothing tells the process of the revokes below.
    const locks = etcd.backend({ client, sessionTtlMs: 30_000 });
    const [k1, k2] = [newKey(), newKey()];

    const first = await locks.acquire(request(k1, 'a'));
    const queued = locks.acquire(request(k1, 'b'));
    const tried = (await locks.tryAcquire(request(k2, 'c')))!;
    assert.equal(await locks.tryAcquire(request(k2, 'd')), null);
    await locks.release(first, 10_000);
    await locks.release(await within(queued, 5_000, 'the queued acquisition'), 10_000);
    await locks.release(tried, 10_000);
    assert.equal(leases, 1, 'more than one session lease for one process');

    // etcd drops the session (as at its ttl, while this process was paused): the next
    // acquisition finds it gone ("lease not found") and queues again on a new session.
    const probe = (await locks.tryAcquire(request(k2, 'probe')))!;
    const firstLease = await etcd.leaseOf(k2);
    await locks.release(probe, 10_000);
    await etcd.admin.leaseClient.leaseRevoke({ ID: firstLease });
    const afterLoss = await within(locks.acquire(request(k1, 'after-loss')), 5_000, 'the acquisition after the session loss');
    const secondLease = await etcd.leaseOf(k1);
    assert.notEqual(secondLease, firstLease);
    assert.equal(leases, 2, 'not exactly one more session lease after the loss');
    await locks.release(afterLoss, 10_000);

    // The same for a try-lock.
    await etcd.admin.leaseClient.leaseRevoke({ ID: secondLease });
    const triedAfterLoss = await locks.tryAcquire(request(k2, 'try-after-loss'));
    assert.ok(triedAfterLoss, 'the try-lock after the session loss failed or found the lock taken');
    assert.notEqual(await etcd.leaseOf(k2), secondLease);
    assert.equal(leases, 3, 'not exactly one more session lease after the second loss');
    await locks.release(triedAfterLoss, 10_000);
  });
});

describe('etcd backend against an endpoint that accepts connections and never answers', () => {
  let server: Server;
  let host: string;
  const sockets = new Set<Socket>();

  before(async () => {
    const port = await freePort();
    server = createServer((socket) => sockets.add(socket));
    await new Promise<void>((resolve) => server.listen(port, '127.0.0.1', resolve));
    host = `http://127.0.0.1:${port}`;
  });
  after(async () => {
    for (const socket of sockets) socket.destroy();
    await new Promise<void>((resolve) => server.close(() => resolve()));
  });

  it('gives up at waitTimeoutMs saying the server is unreachable, and at the caller\'s abort, while the session is being opened', async () => {
    const service = lockServiceOver(createEtcdBackend({ type: 'etcd', hosts: host }));
    try {
      const started = Date.now();
      await assert.rejects(service.acquire('silent', { waitTimeoutMs: 200 }), (error: unknown) => {
        assert.ok(error instanceof LockServerUnreachableError, `expected LockServerUnreachableError, got ${String(error)}`);
        assert.equal(error.address, host.replace('http://', ''));
        assert.match(String((error.cause as Error).message), /not granted the session lease/);
        return true;
      });
      const timedOutMs = Date.now() - started;
      assert.ok(timedOutMs < 1_000, `waitTimeoutMs 200 ended the wait only after ${timedOutMs} ms`);
      console.log(`unanswered session grant: waitTimeoutMs 200 ended the wait after ${timedOutMs} ms`);

      const caller = new AbortController();
      const aborted = service.acquire('silent', { signal: caller.signal });
      setTimeout(() => caller.abort(new Error('the caller gave up')), 100);
      await assert.rejects(within(aborted, 1_000, 'the aborted acquisition'), /the caller gave up/);
    } finally {
      // Closing waits for the session grant still on its way: bounded by its deadlines.
      await service.onApplicationShutdown();
    }
  });

  it("bounds the session grant on a user's client, which has no deadlines of its own", async () => {
    const client = new Etcd3({ hosts: host });
    const locks = createEtcdBackend({ type: 'etcd', client });
    try {
      const started = Date.now();
      await assert.rejects(within(locks.tryAcquire(request('silent', 'o')), 10_000, 'the try-lock'), (error: Error) => !/nothing after/.test(error.message));
      const failedMs = Date.now() - started;
      // One call's deadline: serverTimeoutMs, 5 s by default.
      assert.ok(failedMs < 5_000 + 1_000, `the session grant failed only after ${failedMs} ms`);
      console.log(`unanswered session grant on a user's client: failed after ${failedMs} ms`);
    } finally {
      // Closing waits for the grant still on its way: a grant with no deadline would hang here.
      await within(locks.close(), 10_000, 'closing the backend').finally(() => client.close());
    }
  });
});
