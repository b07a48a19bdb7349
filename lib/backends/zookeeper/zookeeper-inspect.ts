import { DistributedLockError } from '../../errors';
import type { LockHolder, LockInspection } from '../lock-backend.interface';
import { batchToken } from '../../queue/batch';
import { ZkCode, zkCode, zxidOf, type ZkStat } from './zookeeper-client';
import { holdersOf } from './zookeeper-entry-rule';
import { holderDescription } from './zookeeper-holder-record';
import { lockNodeName, sortedEntries, type QueueEntry } from './zookeeper-paths';
import type { ZooKeeperSession } from './zookeeper-session';
import type { ZooKeeperSessions } from './zookeeper-sessions';
import { repeatOnConnectionLoss } from './zookeeper-wait';

/** Lists of the queue before giving up, when each time a holder leaves before it can be read. */
const READ_ROUNDS = 5;

interface QueueHolder {
  readonly path: string;
  readonly owner: string;
  readonly stat: ZkStat;
  /** Its session's holder description (zookeeper-holder-record), if kept. */
  readonly description?: string;
}

interface QueueHolders {
  readonly entries: readonly QueueEntry[];
  readonly holders: readonly QueueHolder[];
  /** Lock nodes that do not hold. */
  readonly waiting: number;
}

/**
 * Operators' view of a lock name in ZooKeeper, read from the server alone: the entries under
 * the name's parent that meet their mode's rule hold (holdersOf: the lowest write node, the
 * read nodes with no write node ahead, the first `limit` permits), every other one waits (one
 * per queued batch of writers or readers of a process: the server cannot see how many callers a
 * batch holds; one per permit). A holder's owner is `<session id, hex>/<entry id>` (its ephemeral
 * owner and its data: a write batch's id, the owner of a read batch's first caller or of a
 * permit); its token the one its entry's first turn got, `czxid << 16` (later turns are never written).
 */
export class ZooKeeperInspector {
  constructor(
    private readonly sessions: ZooKeeperSessions,
    private readonly rootPath: string,
  ) {}

  /** Three round trips: the children of the name's parent, the holders' data and stat (pipelined), their sessions' descriptions (pipelined). */
  async inspect(key: string): Promise<LockInspection> {
    const queue = await this.withSession('inspect a lock', (session) => this.holders(session, key));
    if (!queue) return { held: false, waiting: 0 };
    const first = queue.entries[0];
    const holders: LockHolder[] = queue.holders.map((holder) => ({
      owner: holder.owner,
      fencingToken: batchToken(zxidOf(holder.stat.czxid), 0n),
      ...(holder.description !== undefined ? { description: holder.description } : {}),
    }));
    const view = { held: true, mode: first.mode, holders, holder: holders[0], waiting: queue.waiting };
    return first.limit === undefined ? view : { ...view, limit: first.limit };
  }

  /**
   * Deletes every holder's node, whoever's session owns it: each node's own watch tells its
   * holder at once, the watches behind grant who is next. False when there was no holder, or
   * each let go between the read and the delete.
   */
  async forceRelease(key: string): Promise<boolean> {
    return this.withSession('force the release of a lock', async (session) => {
      const queue = await this.holders(session, key);
      if (!queue) return false;
      const removed = await Promise.all(queue.holders.map((holder) => removeNode(session, holder.path)));
      return removed.includes(true);
    });
  }

  /** `work` on a connected session, the whole of it bounded like any call of the backend. */
  private async withSession<T>(operation: string, work: (session: ZooKeeperSession) => Promise<T>): Promise<T> {
    const startedAt = performance.now();
    const session = await this.sessions.connected(operation, undefined);
    return this.sessions.bounded(work(session), operation, undefined, startedAt);
  }

  /** The queue's holders, or undefined when the name has no lock node (or no parent at all). */
  private async holders(session: ZooKeeperSession, key: string): Promise<QueueHolders | undefined> {
    const parent = `${this.rootPath}/${lockNodeName(key)}`;
    for (let round = 1; ; round++) {
      const children = await repeatOnConnectionLoss(() => session.getChildren(parent)).catch((error: unknown) => {
        if (zkCode(error) === ZkCode.NO_NODE) return [];
        throw error;
      });
      const entries = sortedEntries(children);
      if (entries.length === 0) return undefined;
      const holding = holdersOf(entries);
      const nodes = await Promise.all(holding.map((entry) => repeatOnConnectionLoss(() => session.read(`${parent}/${entry.name}`))));
      if (nodes.every((node) => node !== null)) {
        // One read per holding session, pipelined with each other: the description it kept.
        const sessionIds = [...new Set(nodes.map((node) => node!.stat.ephemeralOwner.toString('hex')))];
        const descriptions = new Map(await Promise.all(sessionIds.map(async (id) => [id, await holderDescription(session, this.rootPath, id)] as const)));
        const holders = nodes.map((node, at) => ({
          path: `${parent}/${holding[at].name}`,
          owner: `${node!.stat.ephemeralOwner.toString('hex')}/${node!.data.toString()}`,
          stat: node!.stat,
          description: descriptions.get(node!.stat.ephemeralOwner.toString('hex')),
        }));
        return { entries, holders, waiting: entries.length - holders.length };
      }
      // A holder let go between the two reads: the queue has moved on, look again.
      if (round === READ_ROUNDS) throw new DistributedLockError(`The queue under ${parent} changed under each of ${READ_ROUNDS} reads; try again.`);
    }
  }
}

/** Deletes a node whoever owns it: true when our delete removed it (a lost reply included). */
async function removeNode(session: ZooKeeperSession, path: string): Promise<boolean> {
  let replyLost = false;
  try {
    await repeatOnConnectionLoss(() =>
      session.remove(path).catch((error: unknown) => {
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
}
