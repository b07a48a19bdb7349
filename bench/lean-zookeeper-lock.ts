import { randomUUID } from 'node:crypto';
import { CreateMode, State, type Client } from 'node-zookeeper-client';
import { call } from './zookeeper-call';
import { LeanLockCore } from './lean-lock-core';
import type { LockRunner } from './workloads';

/**
 * The least an uncontended cycle over this library's two ZooKeeper writes must do to keep the
 * lock's basic promises, written as lean as it goes (LeanLockCore): a protected-mode node name
 * unique to the attempt, the fencing token (the parent's mzxid after the multi), and the session's
 * end firing the lost signal besides the lease deadline. No queue of the process's own callers, no
 * waiting, no lock-delay, no parent cleanup, no connection-loss recovery: a yardstick for the
 * library's own layer, not a lock to use (it refuses to wait). `parent` must exist.
 */
export function leanZooKeeperLock(client: Client, parent: string, address: string, ttlMs: number): LockRunner {
  const core = new LeanLockCore<bigint>({ name: 'zookeeper', address }, ttlMs);
  client.on('state', (state: State) => {
    if (state === State.DISCONNECTED || state === State.EXPIRED) core.loseAll(new Error(`session ${state.name}`));
  });

  return async (name, section) => {
    if (core.holds(name)) return void (await section());
    const created = await core.bounded(
      call<{ path: string; fencingToken: bigint; siblings: number }>((done) =>
        client
          .transaction()
          .create(`${parent}/_c_${randomUUID()}-lock-`, CreateMode.EPHEMERAL_SEQUENTIAL)
          .setData(parent, null, -1)
          .commit((error, results) => {
            if (error) return done(error, undefined!);
            const stat = results[1].stat!;
            done(null, { path: results[0].path!, fencingToken: stat.mzxid.readBigInt64BE(0), siblings: stat.numChildren - 1 });
          }),
      ),
      'create the lock node',
    );
    const release = () => core.bounded(call<void>((done) => client.remove(created.path, -1, (error) => done(error, undefined))), 'delete the lock node');
    if (created.siblings !== 0) {
      await release();
      throw new Error(`lean lock: "${name}" has other nodes in its queue (it is for uncontended rounds only)`);
    }
    await core.hold(name, created.path, created.fencingToken, section, release);
  };
}
