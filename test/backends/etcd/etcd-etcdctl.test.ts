import assert from 'node:assert/strict';
import type { ChildProcess } from 'node:child_process';
import { after, before, describe, it } from 'node:test';
import type { LockService } from '../../../lib';
import { moduleLikeService } from '../../support/lock-service-factory';
import { sleep } from '../../support/timing';
import { etcdFixture, within } from './etcd-test-kit';
import { etcdctlLock, settlesWithin } from './etcdctl-peer';

/**
 * Locks shared with `etcdctl lock` (etcd-client 3.4, Go's concurrency.Mutex on the client side),
 * the real client, both ways: the default layout is a promise, not an accident. Our name "n" with
 * the default keyPrefix is etcdctl's "lock:n"; a '/' in a name is "%2F" (docs/etcd.md).
 */

describe('etcd backend and etcdctl lock on the same name', () => {
  const etcd = etcdFixture();
  let service: LockService;
  const children: ChildProcess[] = [];
  const lock = (name: string, command?: string[]) => {
    const started = etcdctlLock(etcd.cluster.hosts, name, command);
    children.push(started.child);
    return started;
  };

  before(async () => {
    ({ service } = await moduleLikeService({ backend: { type: 'etcd', hosts: etcd.cluster.hosts } }));
  });

  after(async () => {
    for (const child of children) if (child.exitCode === null) child.kill('SIGKILL');
    await service.onApplicationShutdown();
  });

  it('etcdctl waits while we hold the name, and gets it once we release', async (t) => {
    const ours = await service.acquire('shared-1');
    const theirs = lock('lock:shared-1');
    assert.equal(await settlesWithin(theirs.held, 500), false, 'etcdctl took the lock while we held it');
    const releasedAt = performance.now();
    await ours.release();
    const { at } = await within(theirs.held, 5_000, 'etcdctl after our release');
    t.diagnostic(`etcdctl held the lock ${Math.round(at - releasedAt)} ms after our release`);
    assert.ok(at >= releasedAt);
    theirs.child.kill('SIGINT');
    await within(theirs.exited, 5_000, 'etcdctl exiting');
  });

  it('we wait while etcdctl holds the name (tryAcquire is null), and get it once etcdctl lets go', async (t) => {
    const theirs = lock('lock:shared-2');
    const { key } = await within(theirs.held, 5_000, 'etcdctl taking a free lock');
    assert.ok(key.startsWith('lock:shared-2/'), `etcdctl's key ${key} is not under our name's range`);
    assert.equal(await service.tryAcquire('shared-2'), null, 'tryAcquire took a lock etcdctl holds');
    const ours = service.acquire('shared-2', { waitTimeoutMs: 10_000 });
    assert.equal(await settlesWithin(ours, 500), false, 'we took the lock while etcdctl held it');
    const stoppedAt = performance.now();
    theirs.child.kill('SIGINT');
    const handle = await within(ours, 5_000, 'our acquire after etcdctl let go');
    t.diagnostic(`we held the lock ${Math.round(performance.now() - stoppedAt)} ms after etcdctl was told to let go`);
    await handle.release();
  });

  it("a name with '/' is shared under its escaped form", async () => {
    const ours = await service.acquire('shelf/7');
    const theirs = lock('lock:shelf%2F7');
    assert.equal(await settlesWithin(theirs.held, 500), false, "etcdctl took 'lock:shelf%2F7' while we held 'shelf/7'");
    await ours.release();
    await within(theirs.held, 5_000, 'etcdctl after our release');
    theirs.child.kill('SIGINT');
  });

  it('contended from both sides: no two holds overlap, and the key create revisions rise in grant order', { timeout: 60_000 }, async (t) => {
    /** [start, end] in wall-clock microseconds, and the holder's key create revision. */
    const holds: { who: string; start: number; end: number; revision: bigint }[] = [];
    const wallMicros = () => Math.round((performance.timeOrigin + performance.now()) * 1000);
    // etcdctl runs the command while it holds the lock, with ETCD_LOCK_KEY set to its key. (Its
    // ETCD_LOCK_REV is the store's revision when it was granted, not the key's create revision.)
    const createRevision = `etcdctl --endpoints ${etcd.cluster.hosts.join(',')} get "$ETCD_LOCK_KEY" -w fields | sed -n 's/^"CreateRevision" : //p'`;
    const script = `echo "$(date +%s%6N) $(${createRevision})"; sleep 0.03; date +%s%6N`;
    const theirRuns = (async () => {
      for (let i = 0; i < 8; i++) {
        const run = lock('lock:shared-3', ['sh', '-c', script]);
        let output = '';
        run.child.stdout!.on('data', (chunk) => (output += chunk));
        assert.equal(await within(run.exited, 20_000, 'etcdctl lock with a command'), 0);
        const [first, last] = output.trim().split('\n').slice(-2);
        const [start, revision] = first.split(' ');
        holds.push({ who: 'etcdctl', start: Number(start), end: Number(last), revision: BigInt(revision) });
      }
    })();
    const ourRuns = Promise.all(
      Array.from({ length: 3 }, async () => {
        for (let i = 0; i < 8; i++) {
          await service.withLock('shared-3', async (handle) => {
            const start = wallMicros();
            await sleep(30);
            holds.push({ who: 'us', start, end: wallMicros(), revision: handle.fencingToken >> 16n });
          });
        }
      }),
    );
    await Promise.all([theirRuns, ourRuns]);
    holds.sort((a, b) => a.start - b.start);
    t.diagnostic(`holds in start order: ${holds.map((hold) => hold.who).join(' ')}`);
    for (let i = 1; i < holds.length; i++) {
      const [before, next] = [holds[i - 1], holds[i]];
      assert.ok(next.start >= before.end, `${next.who}'s hold began ${before.end - next.start} us before ${before.who}'s ended`);
      assert.ok(next.revision >= before.revision, `${next.who}'s key (revision ${next.revision}) was granted after ${before.who}'s newer one (${before.revision})`);
      if (next.who !== before.who || next.who === 'etcdctl') assert.ok(next.revision > before.revision, 'two holders shared a create revision');
    }
    assert.ok(holds.some((hold) => hold.who === 'etcdctl') && holds.some((hold) => hold.who === 'us'));
  });
});
