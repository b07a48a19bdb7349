import assert from 'node:assert/strict';
import { execFileSync, type ChildProcess } from 'node:child_process';
import { after, before, describe, it } from 'node:test';
import { LockBackendError, LockConfigError, LockTimeoutError, type LockService } from '../../../lib';
import { callLock } from '../../../lib/backends/etcd/lock-api/lock-rpc';
import { moduleLikeService } from '../../support/lock-service-factory';
import { eventually, sleep } from '../../support/timing';
import { etcdFixture, timerLateness, within } from './etcd-test-kit';
import { etcdctlLock, settlesWithin } from './etcdctl-peer';

/**
 * `protocol: 'lock-api'` (etcd's own Lock service) against the real `etcdctl lock`, both ways,
 * and the server's behaviours the backend relies on or guards against (etcd 3.4 as installed).
 * Our name "n" is etcdctl's "lock:n" (the default keyPrefix).
 */
describe("etcd protocol 'lock-api' and etcdctl lock on the same name", () => {
  const etcd = etcdFixture();
  const services: LockService[] = [];
  const children: ChildProcess[] = [];
  const lock = (name: string) => {
    const started = etcdctlLock(etcd.cluster.hosts, name);
    children.push(started.child);
    return started;
  };
  /** A service on protocol 'lock-api'; a long session ttl unless told, so no keepalive answers a case by chance. */
  const lockApiService = async (options: { sessionTtlMs?: number; serverTimeoutMs?: number } = {}) => {
    const { service } = await moduleLikeService({
      backend: { type: 'etcd', hosts: etcd.cluster.hosts, protocol: 'lock-api', sessionTtlMs: options.sessionTtlMs ?? 60_000 },
      serverTimeoutMs: options.serverTimeoutMs,
    });
    services.push(service);
    return service;
  };
  const keysUnder = async (prefix: string) => (await etcd.admin.getAll().prefix(prefix).exec()).kvs;
  /**
   * The server's watchers: the Lock service's Mutex waits on a watch of the key before its own,
   * so one more means our Lock call is waiting inside the server (nothing else here watches).
   */
  const serverWatchers = async () => {
    const metrics = await (await fetch(`${etcd.cluster.hosts[0]}/metrics`)).text();
    return Number(/^etcd_debugging_mvcc_watcher_total (\S+)$/m.exec(metrics)![1]);
  };
  let service: LockService;

  before(async () => {
    service = await lockApiService();
  });

  after(async () => {
    for (const child of children) if (child.exitCode === null) child.kill('SIGKILL');
    await Promise.all(services.map((each) => each.onApplicationShutdown()));
  });

  it("refuses read locks and semaphores before any I/O, naming protocol 'native'", async () => {
    for (const call of [() => service.acquire('la-0', { mode: 'read' }), () => service.acquireSemaphore('la-0', 2)]) {
      await assert.rejects(call(), (error: unknown) => error instanceof LockConfigError && /protocol 'lock-api' does not offer .*use protocol 'native'/.test(error.message));
    }
    assert.equal((await keysUnder('lock:la-0/')).length, 0);
  });

  it('etcdctl holds: our acquire waits at the server and holds within 1 s of etcdctl being told to let go', async (t) => {
    const theirs = lock('lock:la-1');
    await within(theirs.held, 5_000, 'etcdctl taking a free lock');
    const ours = service.acquire('la-1', { waitTimeoutMs: 10_000 });
    assert.equal(await settlesWithin(ours, 500), false, 'we took the lock while etcdctl held it');
    const stoppedAt = performance.now();
    theirs.child.kill('SIGINT');
    const handle = await within(ours, 5_000, 'our acquire after etcdctl let go');
    const ms = Math.round(performance.now() - stoppedAt);
    t.diagnostic(`we held the lock ${ms} ms after etcdctl's SIGINT (bound 1000 ms)`);
    assert.ok(ms < 1_000, `held ${ms} ms after etcdctl's SIGINT`);
    // The token is the key's create revision (shifted as every batch token), not the answer's header revision.
    const [ownKey] = (await keysUnder('lock:la-1/')).filter((kv) => BigInt(kv.create_revision) << 16n === handle.fencingToken);
    assert.ok(ownKey, `no key under lock:la-1/ has the create revision of token ${handle.fencingToken}`);
    assert.match(ownKey.key.toString(), /^lock:la-1\/[0-9a-f]+$/, "our key is not in the Lock service's layout");
    await handle.release();
  });

  it('we hold: etcdctl lock waits until our release', async (t) => {
    const ours = await service.acquire('la-2');
    const theirs = lock('lock:la-2');
    assert.equal(await settlesWithin(theirs.held, 500), false, 'etcdctl took the lock while we held it');
    const releasedAt = performance.now();
    await ours.release();
    const { at } = await within(theirs.held, 5_000, 'etcdctl after our release');
    t.diagnostic(`etcdctl held the lock ${Math.round(at - releasedAt)} ms after our release`);
    theirs.child.kill('SIGINT');
    await within(theirs.exited, 5_000, 'etcdctl exiting');
  });

  it('our key deleted under us (lease revoked) while we wait: we never report the lock held (etcd-io/etcd#11456)', async (t) => {
    const theirs = lock('lock:la-3');
    await within(theirs.held, 5_000, 'etcdctl taking a free lock');
    const watchers = await serverWatchers();
    const ours = service.acquire('la-3', { waitTimeoutMs: 10_000 });
    let outcome: string | undefined;
    ours.then(
      () => (outcome = 'held'),
      (error: Error) => (outcome = error.message),
    );
    // Revoked only once the server waits: a Lock call that arrives after the revoke is refused outright ("lease not found").
    await eventually(async () => (await serverWatchers()) > watchers, 5_000, "the server's Lock waiting for etcdctl's key", 20);
    const ourLease = (await keysUnder('lock:la-3/')).sort((a, b) => Number(BigInt(b.create_revision) - BigInt(a.create_revision)))[0].lease;
    execFileSync('etcdctl', ['--endpoints', etcd.cluster.hosts.join(','), 'lease', 'revoke', BigInt(ourLease).toString(16)], { env: { ...process.env, ETCDCTL_API: '3' } });
    theirs.child.kill('SIGINT');
    await within(theirs.exited, 5_000, 'etcdctl exiting');
    const error = await within(ours.then(() => undefined, (rejected: unknown) => rejected), 10_000, 'our acquire after its key was deleted');
    t.diagnostic(`our acquire ended with: ${outcome}`);
    assert.ok(error instanceof LockBackendError, `the acquire was granted (${outcome}) though its key was deleted`);
    assert.match(error.message + String((error as Error & { cause?: Error }).cause?.message), /11456/, 'the post-answer check did not catch it');
  });

  it('the 3.4 server answers a Lock whose key was deleted during its wait, and deletes its key when a waiting call is cancelled', async (t) => {
    const theirs = lock('lock:la-4');
    await within(theirs.held, 5_000, 'etcdctl taking a free lock');
    const lease = await etcd.admin.lease(60).grant();
    const leaseHex = BigInt(lease).toString(16);
    // A cancelled wait: its key goes without any delete of ours.
    const cancelled = callLock(etcd.admin, { name: Buffer.from('lock:la-4'), lease });
    cancelled.answer.catch(() => undefined);
    await eventually(async () => (await keysUnder(`lock:la-4/${leaseHex}`)).length === 1, 5_000, 'the waiting key');
    cancelled.cancel();
    await eventually(async () => (await keysUnder(`lock:la-4/${leaseHex}`)).length === 0, 5_000, 'the server deleting its key after the cancel');
    // The answer after a deletion (etcd-io/etcd#11456): what our check guards against.
    const waiting = callLock(etcd.admin, { name: Buffer.from('lock:la-4'), lease });
    const answered = waiting.answer.then(
      (response) => `answered with key ${response.key.toString()}`,
      (error: Error) => `failed: ${error.message}`,
    );
    await eventually(async () => (await keysUnder(`lock:la-4/${leaseHex}`)).length === 1, 5_000, 'the waiting key');
    execFileSync('etcdctl', ['--endpoints', etcd.cluster.hosts.join(','), 'lease', 'revoke', leaseHex], { env: { ...process.env, ETCDCTL_API: '3' } });
    theirs.child.kill('SIGINT');
    const said = await within(answered, 5_000, 'the Lock call after its key was deleted');
    t.diagnostic(`the server's Lock, its key deleted while it waited: ${said}`);
    assert.equal(said, `answered with key lock:la-4/${leaseHex}`, 'this server checks its own key after the wait: etcd-io/etcd#11456 is fixed in it');
    assert.equal((await keysUnder('lock:la-4/')).length, 0);
  });

  it('a waiter that gives up leaves no key behind: etcdctl gets the lock at once after the holder lets go', async (t) => {
    const theirs = lock('lock:la-5');
    await within(theirs.held, 5_000, 'etcdctl taking a free lock');
    await assert.rejects(service.acquire('la-5', { waitTimeoutMs: 700 }), LockTimeoutError);
    await eventually(async () => (await keysUnder('lock:la-5/')).length === 1, 2_000, "only etcdctl's key left");
    const next = lock('lock:la-5');
    await sleep(300);
    theirs.child.kill('SIGINT');
    const stoppedAt = performance.now();
    const { at } = await within(next.held, 5_000, 'the next etcdctl after the first let go');
    t.diagnostic(`the next etcdctl held the lock ${Math.round(at - stoppedAt)} ms after the first's SIGINT`);
    next.child.kill('SIGINT');
  });

  it('a Lock call to a paused (SIGSTOP) server ends by waitTimeoutMs', async (t) => {
    const holder = await service.acquire('la-6');
    const waiter = await lockApiService({ serverTimeoutMs: 10_000 });
    const waitTimeoutMs = 1_500;
    const lateness = timerLateness();
    const startedAt = performance.now();
    const ours = waiter.acquire('la-6', { waitTimeoutMs });
    ours.catch(() => undefined);
    await eventually(async () => (await keysUnder('lock:la-6/')).length === 2, 1_000, 'the waiting key');
    etcd.cluster.pause(0);
    try {
      const error = await within(ours.then(() => undefined, (rejected: unknown) => rejected), waitTimeoutMs + 5_000, 'the acquire on a paused server');
      const ms = Math.round(performance.now() - startedAt);
      const bound = waitTimeoutMs + lateness.stop() + 50;
      t.diagnostic(`the acquire ended ${ms} ms after it began, the server paused while its Lock call waited (bound ${bound} ms: waitTimeoutMs ${waitTimeoutMs} + measured timer lateness), with ${(error as Error).name}`);
      assert.ok(error instanceof Error);
      assert.ok(ms <= bound, `ended ${ms} ms after it began, past ${bound}`);
    } finally {
      etcd.cluster.resume(0);
    }
    await holder.release();
  });
});
