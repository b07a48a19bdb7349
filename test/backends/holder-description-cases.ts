import assert from 'node:assert/strict';
import { hostname } from 'node:os';
import { after, describe, it } from 'node:test';
import type { BackendOptions, LockService } from '../../lib';
import { HolderProcess } from '../support/holder-process';
import { moduleLikeService } from '../support/lock-service-factory';
import { eventually } from '../support/timing';

/** A holder description as the server keeps it, and how long until it expires there. */
export interface HolderRecord {
  readonly description: string;
  readonly expiresInMs: number;
}

/** A service whose server work (commands, statements) can be counted, to compare a lock cycle's cost. */
export interface CountedService {
  readonly service: LockService;
  /** The work done so far: commands the server ran, or statements this service's pool sent. */
  work(): Promise<number>;
}

/** What differs between the backends. */
export interface HolderDescriptionTarget {
  /** JSON-safe: the child processes get them too. */
  readonly backend: BackendOptions;
  /** The descriptions kept at the server now (expired ones left out). */
  records(): Promise<HolderRecord[]>;
  /**
   * With `recordsPerProcess`: a service over the backend, with the module's holderDescription
   * `description`, or built without one (none: nothing is recorded).
   */
  counted?(description: string | undefined): Promise<CountedService>;
}

/** Records expire this long after their last refresh (HOLDER_RECORD_TTL_MS of each backend). */
const RECORD_TTL_MS = 60_000;

/**
 * inspect() names the holder's machine and process. On a backend with no server-side session,
 * each process keeps one record with an expiry, refreshed on a timer; no lock call writes or
 * waits for it, and close removes it.
 */
export function holderDescriptionCases(
  target: () => HolderDescriptionTarget,
  {
    readLocks,
    recordsPerProcess,
  }: {
    readonly readLocks: boolean;
    /** The backend has no server-side session (Redis, plain, Redlock, PostgreSQL); etcd and ZooKeeper keep the record with theirs, tested in their own files. */
    readonly recordsPerProcess: boolean;
  },
): void {
  describe('the holder description in inspect()', () => {
    const services: LockService[] = [];
    let seq = 0;
    const newName = (what: string) => `described-${what}-${process.pid}-${++seq}`;
    const service = async (options: { holderDescription?: string } = {}) => {
      const made = (await moduleLikeService({ backend: target().backend, ...options })).service;
      services.push(made);
      return made;
    };
    const descriptions = async () => (await target().records()).map((record) => record.description);

    after(async () => {
      await Promise.all(services.map((each) => each.onApplicationShutdown()));
    });

    it("another process's lock: its host name and pid by default, in the JSON form too", async () => {
      const holder = await HolderProcess.withModule({ backend: target().backend });
      try {
        const name = newName('default');
        await holder.acquire(name);
        await eventually(async () => (await descriptions()).includes(`${hostname()} pid ${holder.pid}`), 5_000, "the child's record", 20);
        const seen = await (await service()).inspect(name);
        assert.equal(seen.holder?.description, `${hostname()} pid ${holder.pid}`);
        assert.equal((JSON.parse(JSON.stringify(seen)) as { holder: { description: string } }).holder.description, `${hostname()} pid ${holder.pid}`);
      } finally {
        await holder.stop();
      }
    });

    it('the module option holderDescription, as another process sees it, for acquire, tryAcquire and withLock alike', async () => {
      const podA = await service({ holderDescription: 'orders-7f9c-pod-a' });
      const observer = await service();
      await eventually(async () => (await descriptions()).includes('orders-7f9c-pod-a'), 5_000, 'the record of pod a', 20);
      const acquired = newName('acquire');
      const handle = await podA.acquire(acquired);
      assert.equal((await observer.inspect(acquired)).holder?.description, 'orders-7f9c-pod-a');
      await handle.release();
      // A try's entry is named after its process as a queued one is.
      const tried = newName('try');
      const taken = await podA.tryAcquire(tried);
      assert.ok(taken, 'the try found the lock held');
      assert.equal((await observer.inspect(tried)).holder?.description, 'orders-7f9c-pod-a');
      await taken.release();
      const withLock = newName('with-lock');
      const seen = await podA.withLock(withLock, () => observer.inspect(withLock));
      assert.equal(seen.holder?.description, 'orders-7f9c-pod-a');
    });

    // Where a lock may have several holders.
    if (readLocks) it('read locks of two processes: each holder with its own', async () => {
      const [podA, podB] = [await service({ holderDescription: 'reader-pod-a' }), await service({ holderDescription: 'reader-pod-b' })];
      await eventually(async () => {
        const kept = await descriptions();
        return kept.includes('reader-pod-a') && kept.includes('reader-pod-b');
      }, 5_000, 'the records of both pods');
      const name = newName('read');
      const [a, b] = [await podA.acquire(name, { mode: 'read' }), await podB.acquire(name, { mode: 'read' })];
      try {
        const seen = await (await service()).inspect(name);
        assert.deepEqual(seen.holders?.map((holder) => holder.description).sort(), ['reader-pod-a', 'reader-pod-b']);
      } finally {
        await Promise.all([a.release(), b.release()]);
      }
    });

    if (recordsPerProcess) it('one record per process with an expiry, never written per lock (a lock cycle costs what it costs without one), removed at close', async (t) => {
      const counted = target().counted!;
      const described = await counted('orders-pod-b');
      const bare = await counted(undefined);
      try {
        await eventually(async () => (await descriptions()).includes('orders-pod-b'), 5_000, 'the record of pod b', 20);
        const record = (await target().records()).find((each) => each.description === 'orders-pod-b')!;
        assert.ok(record.expiresInMs > 0 && record.expiresInMs <= RECORD_TTL_MS, `the record expires in ${record.expiresInMs} ms`);
        const cycles = async ({ service: locks, work }: CountedService) => {
          // Warmed up first: a first call may differ (a script sent whole, a statement prepared).
          for (let i = 0; i < 2; i++) await (await locks.acquire(newName('warm-up'))).release();
          const before = await work();
          for (let i = 0; i < 10; i++) {
            await (await locks.acquire(newName('cycle'))).release();
            await (await locks.tryAcquire(newName('cycle')))!.release();
            await locks.withLock(newName('cycle'), () => undefined);
          }
          return (await work()) - before;
        };
        const [withRecord, without] = [await cycles(described), await cycles(bare)];
        t.diagnostic(`30 lock cycles: ${withRecord} commands or statements with a holder description, ${without} without`);
        assert.equal(withRecord, without, `30 lock cycles cost ${withRecord} with a holder description, ${without} without`);
      } finally {
        await bare.service.onApplicationShutdown();
        await described.service.onApplicationShutdown();
      }
      assert.ok(!(await descriptions()).includes('orders-pod-b'), 'the record outlived its process');
    });
  });
}
