import type { Pool } from 'pg';
import { DEFAULT_NAMES } from '../lib/backends/postgres/postgres-names';
import { acquireValues, statements, type AcquireRow } from '../lib/backends/postgres/postgres-statements';
import { LeanLockCore } from './lean-lock-core';
import type { LockRunner } from './workloads';

/**
 * The least an uncontended cycle over this library's own statements must do to keep the lock's
 * basic promises, written as lean as it goes (LeanLockCore). No queue of the process's own
 * callers, no renewals, no diagnostics: a yardstick for the library's own layer, not a lock to
 * use under contention (it refuses to wait).
 */
export function leanLeaseRowLock(pool: Pool, address: string, ttlMs: number): LockRunner {
  const sql = statements(DEFAULT_NAMES);
  const core = new LeanLockCore<bigint>({ name: 'postgres', address }, ttlMs);

  return async (name, section) => {
    if (core.holds(name)) return void (await section());
    const owner = core.newOwner();
    const release = () => core.bounded(pool.query({ name: 'lean_release', text: sql.release, values: [name, owner] }), 'run a statement');
    const { rows } = await core.bounded(
      pool.query<AcquireRow>({ name: 'lean_take', text: sql.acquire, values: acquireValues({ key: name, entry: owner, ttlMs, aliveMs: 60_000, lockDelayMs: 0 }, 'bench_lean', true) }),
      'run a statement',
    );
    if (rows[0].granted_fence === null) {
      await release();
      throw new Error(`lean lock: "${name}" is held by someone else (it is for uncontended rounds only)`);
    }
    await core.hold(name, owner, BigInt(rows[0].granted_fence), section, release);
  };
}
