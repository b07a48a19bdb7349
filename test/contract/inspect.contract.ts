import assert from 'node:assert/strict';
import { afterEach, describe, it } from 'node:test';
import { LockKeyError, type BackendOptions, type LockBackend, type LockHandle, type LockInspectionResult, type LockService } from '../../lib';
import { countingBackend } from '../support/counting-backend';
import { HolderProcess } from '../support/holder-process';
import { abortedWithin, eventually, sleep } from '../support/timing';

/** What the inspect cases need of the contract suite around them. */
export interface InspectContext {
  /** The same server as a `backend` module option (JSON-safe) for another process; absent for an in-process backend. */
  processBackend(): BackendOptions | undefined;
  /** A new client of the server, connected. */
  newBackend(): Promise<LockBackend>;
  /** A LockService over `backend` (default: a new client of the server), closed after each case. */
  client(backend?: LockBackend): Promise<LockService>;
  newKey(): string;
  /** The server's lease granularity: a lease of ttlMs is rounded up to a multiple of it (etcd: whole seconds). Default 1. */
  leaseRoundingMs?: number;
  /** Waiters are granted in queue order (BackendCapabilities.fifo); default true. */
  fifo?: boolean;
}

/** The lease of the other process's locks: renewed every third of it, so a forced release is noticed well within it. */
const OTHER_TTL_MS = 1_500;
/** How soon after a forced release the next waiter must be granted: far below the lease, which the holder keeps renewing. */
const HANDOVER_BOUND_MS = 1_000;

/**
 * A holder of locks other than the test's own LockService: a child process (its own Nest app)
 * on a server backend, another client of the same store for the in-process memory backend.
 */
interface OtherHolder {
  /** Takes `name`; resolves with the handle's token. */
  acquire(name: string): Promise<bigint>;
  release(): Promise<void>;
  /** Resolves when the lock taken with acquire() was lost. */
  lost(timeoutMs: number): Promise<void>;
  /** Queues for `name` in the background; `entered` resolves with the token once granted (released at once). */
  queue(name: string): { entered: Promise<bigint>; done: Promise<void> };
  stop(): Promise<void>;
}

/**
 * LockService.inspect and forceRelease (README, "Operations"): the view comes from the server
 * (another process's lock and waiters show up), tokens match the holder's handle, and a forced
 * release hands the lock on while the old holder learns at its next renewal.
 */
export function inspectCases(context: InspectContext): void {
  describe('inspect and forceRelease', () => {
    const others: OtherHolder[] = [];
    afterEach(async () => {
      await Promise.all(others.splice(0).map((other) => other.stop()));
    });

    async function otherHolder(): Promise<OtherHolder> {
      const backend = context.processBackend();
      const other = backend ? await childHolder(backend) : await inProcessHolder(await context.client());
      others.push(other);
      return other;
    }

    it("shows another process's lock with the holder's token, and the lock free once released", async () => {
      const key = context.newKey();
      const [observer, other] = await Promise.all([context.client(), otherHolder()]);
      assertFree(await observer.inspect(key), key);
      const token = await other.acquire(key);
      const view = await observer.inspect(key);
      assert.equal(view.name, key);
      assert.equal(view.held, true, `not held: ${show(view)}`);
      assert.equal(view.holder?.fencingToken, token, `inspect's token is not the holder's: ${show(view)}, handle ${token}`);
      assert.equal(typeof view.holder?.owner, 'string');
      assert.ok(view.holder!.owner.length > 0, 'empty owner');
      assert.equal(view.waiting, 0, show(view));
      const rounding = context.leaseRoundingMs ?? 1;
      const serverLeaseMs = Math.ceil(OTHER_TTL_MS / rounding) * rounding;
      if (view.holder?.expiresInMs !== undefined) assert.ok(view.holder.expiresInMs > 0 && view.holder.expiresInMs <= serverLeaseMs, `expiresInMs beyond the ${serverLeaseMs} ms lease: ${show(view)}`);
      if (view.holder?.heldForMs !== undefined) assert.ok(view.holder.heldForMs >= 0, show(view));
      await other.release();
      assertFree(await observer.inspect(key), key);
    });

    it('counts the callers queued behind the holder, over every process', async () => {
      const key = context.newKey();
      const [observer, waiterHere, holder, waiterThere] = await Promise.all([context.client(), context.client(), otherHolder(), otherHolder()]);
      const holderToken = await holder.acquire(key);
      const queuedThere = waiterThere.queue(key);
      await eventually(async () => (await observer.inspect(key)).waiting === 1, 10_000, async () => `one waiter: ${show(await observer.inspect(key))}`, 20);
      const queuedHere = waiterHere.acquire(key, { waitTimeoutMs: 30_000 });
      await eventually(async () => (await observer.inspect(key)).waiting === 2, 10_000, async () => `two waiters: ${show(await observer.inspect(key))}`, 20);
      const view = await observer.inspect(key);
      assert.equal(view.holder?.fencingToken, holderToken, `the holder changed while two waited: ${show(view)}`);
      await holder.release();
      if (context.fifo !== false) {
        // Queue order: the other process's caller (queued first) is served and gone before ours.
        const [thereToken] = await Promise.all([queuedThere.entered, queuedThere.done]);
        const here = await queuedHere;
        assert.ok(here.fencingToken > thereToken && thereToken > holderToken, `tokens ${holderToken}, then ${thereToken} and ${here.fencingToken}`);
        const whileHeld = await observer.inspect(key);
        assert.equal(whileHeld.holder?.fencingToken, here.fencingToken, show(whileHeld));
        assert.equal(whileHeld.waiting, 0, show(whileHeld));
        await here.release();
        assertFree(await observer.inspect(key), key);
        return;
      }
      // No queue order (Redlock): either may be served first, so ours is released before the other's turn is awaited.
      const here = await queuedHere;
      const whileHeld = await observer.inspect(key);
      assert.equal(whileHeld.holder?.fencingToken, here.fencingToken, show(whileHeld));
      assert.ok(whileHeld.waiting <= 1, show(whileHeld));
      await here.release();
      const [thereToken] = await Promise.all([queuedThere.entered, queuedThere.done]);
      assert.ok(thereToken > holderToken && here.fencingToken > holderToken, `tokens ${holderToken}, then ${thereToken} and ${here.fencingToken}`);
      assertFree(await observer.inspect(key), key);
    });

    it("forceRelease grants the next waiter at once; the old holder's signal fires at its next renewal, its token lower", async (t) => {
      const key = context.newKey();
      const [operator, waiterService, holder] = await Promise.all([context.client(), context.client(), otherHolder()]);
      const holderToken = await holder.acquire(key);
      const waiting = waiterService.acquire(key, { waitTimeoutMs: 30_000 });
      await eventually(async () => (await operator.inspect(key)).waiting === 1, 10_000, async () => `the waiter: ${show(await operator.inspect(key))}`, 20);
      const forcedAt = performance.now();
      assert.equal(await operator.forceRelease(key), true, 'a held lock was reported free');
      const next = await waiting;
      const handedMs = performance.now() - forcedAt;
      t.diagnostic(`waiter granted ${Math.round(handedMs)} ms after forceRelease (bound ${HANDOVER_BOUND_MS} ms)`);
      assert.ok(handedMs <= HANDOVER_BOUND_MS, `waiter granted ${Math.round(handedMs)} ms after forceRelease`);
      assert.ok(next.fencingToken > holderToken, `new token ${next.fencingToken} not above the old holder's ${holderToken}`);
      await holder.lost(OTHER_TTL_MS + 2_000);
      const lostMs = performance.now() - forcedAt;
      t.diagnostic(`old holder's lost signal ${Math.round(lostMs)} ms after forceRelease (bound: its lease, ${OTHER_TTL_MS} ms)`);
      assert.ok(lostMs <= OTHER_TTL_MS, `the old holder learned ${Math.round(lostMs)} ms after forceRelease`);
      assert.equal(next.isHeld, true, "the old holder's loss disturbed the new holder");
      const view = await operator.inspect(key);
      assert.equal(view.holder?.fencingToken, next.fencingToken, show(view));
      await next.release();
      assert.equal(await operator.forceRelease(key), false, 'a free lock was reported held');
    });

    it('rejects bad names with LockKeyError before any backend call', async () => {
      const { backend, calls } = countingBackend(await context.newBackend());
      const counted = await context.client(backend);
      for (const bad of [undefined, null, '', Number.NaN, {}, [], 42]) {
        await assert.rejects(counted.inspect(bad as never), LockKeyError);
        await assert.rejects(counted.forceRelease(bad as never), LockKeyError);
      }
      assert.equal(calls.inspect + calls.forceRelease, 0);
    });
  });
}

function assertFree(view: LockInspectionResult, key: string): void {
  assert.deepEqual(view, { name: key, held: false, waiting: 0 });
}

function show(view: LockInspectionResult): string {
  return JSON.stringify(view, (_, value) => (typeof value === 'bigint' ? `${value}n` : value));
}

async function childHolder(backend: BackendOptions): Promise<OtherHolder> {
  const child = await HolderProcess.withModule({ backend, ttlMs: OTHER_TTL_MS });
  return {
    acquire: (name) => child.acquire(name, { waitTimeoutMs: 10_000 }),
    release: () => child.release(),
    lost: async (timeoutMs) => void (await child.lost(timeoutMs)),
    queue(name) {
      const { entered, done } = child.withLock(name, { holdMs: 0, waitTimeoutMs: 30_000 });
      return {
        entered: entered.then((event) => BigInt(event.fencingToken)),
        done: done.then((event) => assert.equal(event.error, undefined, `the queued caller failed: ${event.error?.message}`)),
      };
    },
    stop: () => child.stop(),
  };
}

async function inProcessHolder(service: LockService): Promise<OtherHolder> {
  let lock: LockHandle | undefined;
  return {
    async acquire(name) {
      lock = await service.acquire(name, { ttlMs: OTHER_TTL_MS, waitTimeoutMs: 10_000 });
      return lock.fencingToken;
    },
    release: () => lock!.release(),
    lost: (timeoutMs) => abortedWithin(lock!.signal, timeoutMs),
    queue(name) {
      let enter!: (token: bigint) => void;
      const entered = new Promise<bigint>((resolve) => (enter = resolve));
      const done = service.withLock(name, (held) => enter(held.fencingToken), { ttlMs: OTHER_TTL_MS, waitTimeoutMs: 30_000 });
      return { entered, done };
    },
    // Closed with the suite's other clients.
    stop: () => sleep(0),
  };
}
