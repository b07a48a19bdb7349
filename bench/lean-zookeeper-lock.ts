import { randomUUID } from 'node:crypto';
import { CreateMode, State, type Client, type Exception } from 'node-zookeeper-client';
import { deadlines } from '../lib/deadlines';
import { LazyAbort } from '../lib/lazy-abort';
import { withinServerTimeout } from '../lib/server-timeout';
import { LeanScope } from './lean-scope';
import type { LockRunner } from './workloads';

const SERVER_TIMEOUT_MS = 5_000;

/**
 * The least an uncontended cycle over this library's two ZooKeeper writes must do to keep the
 * lock's basic promises, written as lean as it goes: a protected-mode node name unique to the
 * attempt, each call bounded as the library bounds one (withinServerTimeout), the fencing token
 * (the parent's mzxid after the multi), a lease deadline and the session's end that fire a lazily
 * made lost signal, the holder recorded, re-entrancy in the async chain. No queue of the process's
 * own callers, no waiting, no lock-delay, no parent cleanup, no connection-loss recovery: a
 * yardstick for the library's own layer, not a lock to use (it refuses to wait). `parent` must exist.
 */
export function leanZooKeeperLock(client: Client, parent: string, address: string, ttlMs: number): LockRunner {
  const held = new Map<string, { key: string; fencingToken: bigint; loss: LazyAbort }>();
  const scope = new LeanScope();
  const server = { name: 'zookeeper', address };
  const bounded = <T>(work: Promise<T>, operation: string): Promise<T> => withinServerTimeout(work, server, operation, SERVER_TIMEOUT_MS);
  // One listener for every holder: a session that ends loses them all.
  client.on('state', (state: State) => {
    if (state === State.DISCONNECTED || state === State.EXPIRED) for (const holder of held.values()) holder.loss.abort(new Error(`session ${state.name}`));
  });

  return async (name, section) => {
    if (scope.holds(name)) return void (await section());
    const prefix = `_c_${randomUUID()}-lock-`;
    const created = await bounded(
      call<{ path: string; fencingToken: bigint; siblings: number }>((done) =>
        client
          .transaction()
          .create(`${parent}/${prefix}`, CreateMode.EPHEMERAL_SEQUENTIAL)
          .setData(parent, null, -1)
          .commit((error, results) => {
            if (error) return done(error, undefined!);
            const stat = results[1].stat!;
            done(null, { path: results[0].path!, fencingToken: stat.mzxid.readBigInt64BE(0), siblings: stat.numChildren - 1 });
          }),
      ),
      'create the lock node',
    );
    const release = () => bounded(call<void>((done) => client.remove(created.path, -1, (error) => done(error, undefined))), 'delete the lock node');
    if (created.siblings !== 0) {
      await release();
      throw new Error(`lean lock: "${name}" has other nodes in its queue (it is for uncontended rounds only)`);
    }
    const loss = new LazyAbort();
    held.set(created.path, { key: name, fencingToken: created.fencingToken, loss });
    const lease = deadlines.add(performance.now() + ttlMs, () => loss.abort(new Error(`lease of "${name}" ended`)));
    try {
      await scope.run(name, section);
    } finally {
      deadlines.cancel(lease);
      held.delete(created.path);
      await release();
    }
  };
}

function call<T>(start: (done: (error: Error | Exception | null, value: T) => void) => void): Promise<T> {
  return new Promise<T>((resolve, reject) => start((error, value) => (error ? reject(error) : resolve(value))));
}
