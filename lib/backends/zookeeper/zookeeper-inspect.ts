import { DistributedLockError } from '../../errors';
import type { LockInspection } from '../lock-backend.interface';
import { batchToken } from '../local-queue/batch';
import { ZkCode, zkCode, zxidOf, type ZkStat } from './zookeeper-client';
import { lockNodeName, sortedLockNodes } from './zookeeper-paths';
import type { ZooKeeperSession } from './zookeeper-session';
import type { ZooKeeperSessions } from './zookeeper-sessions';
import { repeatOnConnectionLoss } from './zookeeper-wait';

/** Lists of the queue before giving up, when each time its head leaves before it can be read. */
const READ_ROUNDS = 5;

interface QueueHead {
  readonly path: string;
  readonly owner: string;
  readonly stat: ZkStat;
  /** Lock nodes behind the head. */
  readonly behind: number;
}

/**
 * Operators' view of a lock name in ZooKeeper, read from the server alone: the lowest sequential
 * node under the name's parent holds, every other one is a waiting entry (one per queued batch
 * of a process: the server cannot see how many callers a batch holds). The holder's owner is
 * `<session id, hex>/<entry id>` (its ephemeral owner and its data); its token the one its
 * entry's first turn got, `czxid << 16` (later turns of the same batch are never written).
 */
export class ZooKeeperInspector {
  constructor(
    private readonly sessions: ZooKeeperSessions,
    private readonly rootPath: string,
  ) {}

  /** Two reads: the children of the name's parent, then the head node's data and stat. */
  async inspect(key: string): Promise<LockInspection> {
    const head = await this.withSession('inspect a lock', (session) => this.head(session, key));
    if (!head) return { held: false, waiting: 0 };
    return { held: true, holder: { owner: head.owner, fencingToken: batchToken(zxidOf(head.stat.czxid), 0n) }, waiting: head.behind };
  }

  /**
   * Deletes the head node, whoever's session owns it: the node's own watch tells its holder at
   * once, the next node's watch grants the next batch. False when there was no holder, or it let
   * go between the read and the delete.
   */
  async forceRelease(key: string): Promise<boolean> {
    return this.withSession('force the release of a lock', async (session) => {
      const head = await this.head(session, key);
      if (!head) return false;
      let replyLost = false;
      try {
        await repeatOnConnectionLoss(() =>
          session.remove(head.path).catch((error: unknown) => {
            replyLost ||= zkCode(error) === ZkCode.CONNECTION_LOSS;
            throw error;
          }),
        );
        return true;
      } catch (error) {
        // Gone: its holder let go first, or our own delete went through before its reply was lost.
        if (zkCode(error) === ZkCode.NO_NODE) return replyLost;
        throw error;
      }
    });
  }

  /** `work` on a connected session, the whole of it bounded like any call of the backend. */
  private async withSession<T>(operation: string, work: (session: ZooKeeperSession) => Promise<T>): Promise<T> {
    const startedAt = performance.now();
    const session = await this.sessions.connected(operation, undefined);
    return this.sessions.bounded(work(session), operation, undefined, startedAt);
  }

  /** The queue's head, or undefined when the name has no lock node (or no parent at all). */
  private async head(session: ZooKeeperSession, key: string): Promise<QueueHead | undefined> {
    const parent = `${this.rootPath}/${lockNodeName(key)}`;
    for (let round = 1; ; round++) {
      const children = await repeatOnConnectionLoss(() => session.getChildren(parent)).catch((error: unknown) => {
        if (zkCode(error) === ZkCode.NO_NODE) return [];
        throw error;
      });
      const queue = sortedLockNodes(children);
      if (queue.length === 0) return undefined;
      const path = `${parent}/${queue[0]}`;
      const node = await repeatOnConnectionLoss(() => session.read(path));
      if (node) return { path, owner: `${node.stat.ephemeralOwner.toString('hex')}/${node.data.toString()}`, stat: node.stat, behind: queue.length - 1 };
      // The head let go between the two reads: the queue has moved on, look again.
      if (round === READ_ROUNDS) throw new DistributedLockError(`The queue under ${parent} changed under each of ${READ_ROUNDS} reads; try again.`);
    }
  }
}
