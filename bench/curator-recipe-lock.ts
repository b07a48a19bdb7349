import { randomUUID } from 'node:crypto';
import { CreateMode, type Client } from 'node-zookeeper-client';
import { call } from './zookeeper-call';
import type { LockRunner } from './workloads';

const NO_NODE = -101;

/**
 * A fair lock written the way Curator's InterProcessMutex works, on node-zookeeper-client:
 * create an ephemeral sequential node (its parent made on the first NO_NODE), list the children,
 * hold when lowest or else wait for the node just ahead to go, and delete the node after. No
 * fencing token, no lease, no lost signal: the recipe's round trips and nothing else.
 */
export function curatorRecipeLock(client: Client, root: string): LockRunner {
  return async (name, section) => {
    const parent = `${root}/${encodeURIComponent(name)}`;
    const prefix = `_c_${randomUUID()}-lock-`;
    const path = await createNode(client, parent, prefix);
    const own = path.slice(parent.length + 1);
    try {
      for (;;) {
        const children = (await call<string[]>((done) => client.getChildren(parent, done))).sort((a, b) => sequence(a) - sequence(b));
        const at = children.indexOf(own);
        if (at === 0) break;
        await predecessorGone(client, `${parent}/${children[at - 1]}`);
      }
      await section();
    } finally {
      await call<void>((done) => client.remove(path, -1, (error) => done(error, undefined)));
    }
  };
}

async function createNode(client: Client, parent: string, prefix: string): Promise<string> {
  try {
    return await call<string>((done) => client.create(`${parent}/${prefix}`, CreateMode.EPHEMERAL_SEQUENTIAL, done));
  } catch (error) {
    if ((error as { code?: number }).code !== NO_NODE) throw error;
    await call<string>((done) => client.mkdirp(parent, done));
    return call<string>((done) => client.create(`${parent}/${prefix}`, CreateMode.EPHEMERAL_SEQUENTIAL, done));
  }
}

/** Resolves once `path` is deleted (at once if it already is). */
function predecessorGone(client: Client, path: string): Promise<void> {
  return new Promise<void>((resolve, reject) => {
    client.exists(
      path,
      () => resolve(),
      (error, stat) => {
        if (error) reject(error);
        else if (!stat) resolve();
      },
    );
  });
}

function sequence(node: string): number {
  return Number(node.slice(-10));
}
