import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import type { BackendOptions, LockBackend, LockService } from '../../lib';
import { DEFAULT_KEY_PREFIX } from '../../lib/lock-defaults';
import { toBackendKey } from '../../lib/lock-key';
import { withinBound } from '../contract/failure/failure-target';
import { HolderProcess } from '../support/holder-process';
import { moduleLikeService } from '../support/lock-service-factory';
import { eventually, sleep } from '../support/timing';

/** The module's ttlMs in every process here: renewals every third of it. */
export const TTL_MS = 3_000;
/** A waiter's grant after forceRelease: one watch event from the server, on a loaded 2-core machine. */
const GRANT_BOUND_MS = 1_500;

/** What differs between the backends the inspector cases run on (etcd, ZooKeeper). */
export interface InspectTarget {
  /** JSON-safe: the child processes get them too. */
  readonly backend: BackendOptions;
  /** What a holder's `owner` looks like: its session and its entry. */
  readonly owner: RegExp;
  /** When set, `expiresInMs` is reported and lies in (0, this]; when not, it is absent. */
  readonly expiresAtMostMs?: number;
  /** How long after forceRelease the old holder may take to learn (its next contact with the server). */
  readonly lostBoundMs: number;
}

/**
 * LockBackend.inspect and forceRelease, called on the backend directly, against locks held and
 * awaited by other processes (HolderProcess) and by this one, on a real server.
 */
export function inspectCases(target: () => InspectTarget): void {
  describe('inspect and forceRelease', () => {
    const children: HolderProcess[] = [];
    let service: LockService;
    let backend: LockBackend;
    let seq = 0;
    const newName = () => `inspect-${process.pid}-${++seq}`;
    const keyOf = (name: string) => toBackendKey(DEFAULT_KEY_PREFIX, name, backend.maxKeyBytes);
    const inspect = (name: string) => backend.inspect!(keyOf(name));
    const child = async () => {
      const started = await HolderProcess.withModule({ backend: target().backend, ttlMs: TTL_MS });
      children.push(started);
      return started;
    };
    /** Resolves once the server shows `waiting` entries behind the holder. */
    const waitingReaches = (name: string, waiting: number) =>
      eventually(async () => (await inspect(name)).waiting === waiting, 5_000, `${waiting} waiting on ${name}`, 20);

    before(async () => {
      ({ service, backend } = await moduleLikeService({ backend: target().backend, ttlMs: TTL_MS }));
      const warmUp = await service.tryAcquire(`inspect-warm-up-${process.pid}`);
      assert.ok(warmUp, 'the warm-up lock was not free');
      await warmUp.release();
    });

    after(async () => {
      await Promise.all(children.map((holder) => holder.stop()));
      await service?.onApplicationShutdown();
    });

    it('a lock nobody holds: not held, nobody waiting, and forceRelease removes nothing', async () => {
      const name = newName();
      assert.deepEqual(await inspect(name), { held: false, waiting: 0 });
      assert.equal(await backend.forceRelease!(keyOf(name)), false);
    });

    it("another process's lock shows held, with the token its handle shows; free once released", async () => {
      const name = newName();
      const holder = await child();
      const token = await holder.acquire(name);
      const seen = await inspect(name);
      assert.equal(seen.held, true);
      assert.equal(seen.holder?.fencingToken, token, `inspect shows token ${seen.holder?.fencingToken}, the holder's handle ${token}`);
      assert.match(seen.holder!.owner, target().owner);
      assert.equal(seen.waiting, 0);
      assert.equal(seen.holder!.heldForMs, undefined);
      const { expiresAtMostMs } = target();
      if (expiresAtMostMs === undefined) assert.equal(seen.holder!.expiresInMs, undefined);
      else assert.ok(seen.holder!.expiresInMs! > 0 && seen.holder!.expiresInMs! <= expiresAtMostMs, `expiresInMs ${seen.holder!.expiresInMs}`);
      await release(holder);
      assert.deepEqual(await inspect(name), { held: false, waiting: 0 });
    });

    it('waiting counts the callers queued in other processes and in this one; each next holder shows its own token', async () => {
      const name = newName();
      const [first, second] = [await child(), await child()];
      const firstToken = await first.acquire(name);
      const secondGrant = second.acquire(name, { waitTimeoutMs: 20_000 });
      await waitingReaches(name, 1);
      const local = service.acquire(name, { waitTimeoutMs: 20_000 });
      await waitingReaches(name, 2);
      assert.equal((await inspect(name)).holder?.fencingToken, firstToken);

      await release(first);
      const secondToken = await secondGrant;
      const afterFirst = await inspect(name);
      assert.equal(afterFirst.holder?.fencingToken, secondToken);
      assert.equal(afterFirst.waiting, 1);

      await release(second);
      const handle = await local;
      const afterSecond = await inspect(name);
      assert.equal(afterSecond.holder?.fencingToken, handle.fencingToken);
      assert.equal(afterSecond.waiting, 0);
      assert.ok(firstToken < secondToken && secondToken < handle.fencingToken, `tokens ${firstToken}, ${secondToken}, ${handle.fencingToken}`);
      await handle.release();
      assert.deepEqual(await inspect(name), { held: false, waiting: 0 });
    });

    it("forceRelease: the waiter in another process is granted, the holder's lost signal fires, its token is lower", async (t) => {
      const name = newName();
      const [stuck, next] = [await child(), await child()];
      const stuckToken = await stuck.acquire(name);
      const granted = next.acquireTimed(name, { waitTimeoutMs: 20_000 });
      let grantedAt: number | undefined;
      void granted.then(() => (grantedAt = performance.now()), () => undefined);
      await waitingReaches(name, 1);
      let lostAt: number | undefined;
      const lost = stuck.lost(GRANT_BOUND_MS + target().lostBoundMs + 10_000);
      void lost.then(() => (lostAt = performance.now()), () => undefined);

      const forcedAt = performance.now();
      assert.equal(await backend.forceRelease!(keyOf(name)), true);
      const { fencingToken: nextToken } = await granted;
      await lost;
      withinBound(t, 'the waiter in another process granted after forceRelease', grantedAt! - forcedAt, GRANT_BOUND_MS);
      withinBound(t, "the old holder's lost signal after forceRelease", lostAt! - forcedAt, target().lostBoundMs);
      assert.ok(stuckToken < nextToken, `the old holder's token ${stuckToken}, the new one's ${nextToken}`);
      const seen = await inspect(name);
      assert.equal(seen.holder?.fencingToken, nextToken);
      assert.equal(seen.waiting, 0);
      await release(next);
    });

    it("forceRelease in the holder's own process: the callers queued there, behind the same entry or another, are granted in turn", async (t) => {
      const name = newName();
      // One turn of the event loop: both join one entry, the second waits behind the first.
      const holding = service.acquire(name);
      const sameEntry = service.acquire(name, { waitTimeoutMs: 20_000 });
      const stuck = await holding;
      await sleep(50);
      const nextEntry = service.acquire(name, { waitTimeoutMs: 20_000 });
      await waitingReaches(name, 1);

      const forcedAt = performance.now();
      assert.equal(await backend.forceRelease!(keyOf(name)), true);
      const lostAt = await firedAt(stuck.signal, target().lostBoundMs + 10_000);
      withinBound(t, "the holder's lost signal after forceRelease", lostAt - forcedAt, target().lostBoundMs);
      const second = await nextEntry;
      withinBound(t, 'the next entry of the same process granted after forceRelease', performance.now() - forcedAt, target().lostBoundMs + GRANT_BOUND_MS);
      assert.ok(stuck.fencingToken < second.fencingToken, `tokens ${stuck.fencingToken}, then ${second.fencingToken}`);
      await stuck.release();
      // The holder's entry-mate never held: it queued again, behind the next entry.
      await waitingReaches(name, 1);
      await second.release();
      const third = await sameEntry;
      assert.ok(second.fencingToken < third.fencingToken, `tokens ${second.fencingToken}, then ${third.fencingToken}`);
      assert.equal((await inspect(name)).holder?.fencingToken, third.fencingToken);
      await third.release();
    });
  });
}

async function release(holder: HolderProcess): Promise<void> {
  const from = holder.events.length;
  holder.child.send({ type: 'release' });
  await holder.next('released', 10_000, from);
}

/** When (performance.now()) `signal` aborted; rejects after `timeoutMs`. */
function firedAt(signal: AbortSignal, timeoutMs: number): Promise<number> {
  return new Promise((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error(`the lost signal did not fire within ${timeoutMs} ms`)), timeoutMs);
    const done = () => {
      clearTimeout(timer);
      resolve(performance.now());
    };
    if (signal.aborted) return done();
    signal.addEventListener('abort', done, { once: true });
  });
}
