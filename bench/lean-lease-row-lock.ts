import { randomBytes } from 'node:crypto';
import type { Pool } from 'pg';
import { deadlines } from '../lib/deadlines';
import { withinServerTimeout } from '../lib/server-timeout';
import { LazyAbort } from '../lib/lazy-abort';
import { DEFAULT_NAMES } from '../lib/backends/postgres/postgres-names';
import { acquireValues, statements, type AcquireRow } from '../lib/backends/postgres/postgres-statements';
import { LeanScope } from './lean-scope';
import type { LockRunner } from './workloads';

const SERVER_TIMEOUT_MS = 5_000;

/**
 * The least an uncontended cycle over this library's own statements must do to keep the lock's
 * basic promises, written as lean as it goes: a unique owner, each statement bounded as the
 * library bounds a call (withinServerTimeout), the fencing token, a lease deadline that fires a
 * lazily made lost signal, the holder recorded, re-entrancy in the async chain. No queue of the
 * process's own callers, no renewals, no diagnostics: a yardstick for the library's own layer, not
 * a lock to use under contention (it refuses to wait).
 */
export function leanLeaseRowLock(pool: Pool, address: string, ttlMs: number): LockRunner {
  const sql = statements(DEFAULT_NAMES);
  const ownerPrefix = `${randomBytes(12).toString('base64url')}:`;
  let ownerSeq = 0;
  const held = new Map<string, { key: string; fencingToken: bigint; loss: LazyAbort }>();
  const scope = new LeanScope();

  const server = { name: 'postgres', address };
  const bounded = <T>(work: Promise<T>): Promise<T> => withinServerTimeout(work, server, 'run a statement', SERVER_TIMEOUT_MS);

  return async (name, section) => {
    if (scope.holds(name)) return void (await section());
    const owner = ownerPrefix + (++ownerSeq).toString(36);
    const release = () => bounded(pool.query({ name: 'lean_release', text: sql.release, values: [name, owner] }));
    const { rows } = await bounded(pool.query<AcquireRow>({ name: 'lean_take', text: sql.acquire, values: acquireValues({ key: name, entry: owner, ttlMs, aliveMs: 60_000, lockDelayMs: 0 }, 'bench_lean', true) }));
    if (rows[0].granted_fence === null) {
      await release();
      throw new Error(`lean lock: "${name}" is held by someone else (it is for uncontended rounds only)`);
    }
    const loss = new LazyAbort();
    held.set(owner, { key: name, fencingToken: BigInt(rows[0].granted_fence), loss });
    const lease = deadlines.add(performance.now() + ttlMs, () => loss.abort(new Error(`lease of "${name}" ended`)));
    try {
      await scope.run(name, section);
    } finally {
      deadlines.cancel(lease);
      held.delete(owner);
      await release();
    }
  };
}
