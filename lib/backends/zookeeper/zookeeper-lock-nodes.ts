import { randomUUID } from 'node:crypto';
import type { EntryMode } from '../lock-backend.interface';
import { ZkCode, zkCode, zxidOf } from './zookeeper-client';
import { DELAY_MARK } from './zookeeper-delay-records';
import type { LockParents } from './zookeeper-parents';
import { entryPrefix, type NodeLayout } from './zookeeper-protocol';
import type { ZooKeeperSession } from './zookeeper-session';
import { AttemptAgain, repeatOnConnectionLoss } from './zookeeper-wait';

export interface LockNode {
  readonly path: string;
  readonly name: string;
  readonly czxid: bigint;
}

/**
 * Rounds of a create that fail without a reply (CONNECTION_LOSS) or find the parent missing
 * before the acquisition fails; every lost reply is followed by a search for our node, the
 * last one too, so a create that did happen is never left behind.
 */
const CREATE_ROUNDS = 10;

/** Creating and deleting this backend's lock nodes on a session, with Curator's protected mode. */
export class LockNodes {
  constructor(
    private readonly parents: LockParents,
    private readonly rootPath: string,
    private readonly layout: NodeLayout,
  ) {}

  /**
   * Creates our lock node, in one round trip when nothing goes wrong: [create the parent if this
   * client has not seen it] + [create the node and touch the parent, one transaction], pipelined
   * on the session (the server answers in order). `children` is known without asking when the
   * node has no siblings (alone, it holds the lock); otherwise the caller lists them. The node's
   * name marks its mode (entryPrefix, by the layout); `owner` is its data.
   */
  async create(session: ZooKeeperSession, parent: string, owner: string, mode: EntryMode = 'write', limit?: number, lockDelayMs = 0): Promise<{ node: LockNode; children?: string[] }> {
    const prefix = entryPrefix(this.layout, lockDelayMs > 0 ? `${randomUUID()}${DELAY_MARK}` : randomUUID(), mode, limit);
    const data = Buffer.from(owner);
    for (let round = 1; ; round++) {
      const ensured = this.parents.isKnown(parent)
        ? undefined
        : session.createPersistent(parent).then(
            () => undefined,
            (error: unknown) => error,
          );
      try {
        const { path, czxid, siblings } = await session.createWithZxid(parent, prefix, data);
        this.parents.markKnown(parent);
        const name = path.slice(parent.length + 1);
        return { node: { path, name, czxid: zxidOf(czxid) }, children: siblings === 0 ? [name] : undefined };
      } catch (error) {
        const code = zkCode(error);
        if (code === ZkCode.CONNECTION_LOSS) {
          // The reply was lost, not necessarily the create (Curator's protected mode): look for
          // our node, after the last round too, or a create that did happen would block the name.
          const found = await this.find(session, parent, prefix);
          if (found) return found;
        } else if (code === ZkCode.NO_NODE) {
          this.parents.markUnknown(parent);
          const parentError = await ensured;
          const parentCode = zkCode(parentError);
          if (parentCode === ZkCode.NO_NODE) await this.createRoot(session);
          // The parent could not be made (NO_AUTH: the root's ACL refuses us): that is the reason, not its absence.
          else if (parentError !== undefined && parentCode !== ZkCode.NODE_EXISTS && parentCode !== ZkCode.CONNECTION_LOSS) throw parentError;
        } else {
          throw error;
        }
        if (round >= CREATE_ROUNDS) throw error;
      }
    }
  }

  /**
   * Deletes a node of ours that keeps a lock-delay record, with the record, only while the node
   * is still ours: a node gone with its session leaves its record to hold the name.
   */
  async deleteWithRecord(session: ZooKeeperSession, path: string, record: string): Promise<void> {
    try {
      await repeatOnConnectionLoss(() => session.removeWithRecord(path, record));
    } catch (error) {
      // The node is gone (its record then stays), or the record is (never made): the node alone.
      if (zkCode(error) === ZkCode.NO_NODE) return this.delete(session, path);
      if (!session.alive) return;
      throw error;
    }
  }

  /**
   * Deletes a node of ours; already gone is fine; a dead session's nodes go with it. A lost reply
   * sends it again. One promise layer over the call: every release of a lock takes this path.
   */
  delete(session: ZooKeeperSession, path: string): Promise<void> {
    return session.remove(path).then(undefined, (error: unknown) => {
      const code = zkCode(error);
      if (code === ZkCode.CONNECTION_LOSS) return this.delete(session, path);
      if (code === ZkCode.NO_NODE || !session.alive) return;
      throw error;
    });
  }

  private async find(session: ZooKeeperSession, parent: string, prefix: string): Promise<{ node: LockNode; children: string[] } | undefined> {
    let children: string[];
    try {
      children = await repeatOnConnectionLoss(() => session.getChildren(parent));
    } catch (error) {
      if (zkCode(error) === ZkCode.NO_NODE) return undefined;
      throw error;
    }
    const name = children.find((child) => child.startsWith(prefix));
    if (!name) return undefined;
    const path = `${parent}/${name}`;
    const stat = await repeatOnConnectionLoss(() => session.exists(path));
    if (!stat) throw new AttemptAgain(`Lock node ${path} vanished right after its create.`);
    return { node: { path, name, czxid: zxidOf(stat.czxid) }, children };
  }

  /** The root path's nodes, each created unless it exists. */
  async createRoot(session: ZooKeeperSession): Promise<void> {
    let path = '';
    for (const segment of this.rootPath.slice(1).split('/')) {
      path += `/${segment}`;
      try {
        await repeatOnConnectionLoss(() => session.createPersistent(path));
      } catch (error) {
        if (zkCode(error) !== ZkCode.NODE_EXISTS) throw error;
      }
    }
  }
}
