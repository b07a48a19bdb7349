import type { LazyAbort } from '../../lazy-abort';
import { Batch } from '../../queue/batch';
import type { LockNode } from './zookeeper-lock-nodes';
import type { OwnNodeWatch } from './zookeeper-own-node';
import type { ZooKeeperSession } from './zookeeper-session';

/** A batch's lock node at the head of the queue, on the session that created it. */
export interface QueuePlace {
  readonly session: ZooKeeperSession;
  readonly node: LockNode;
  /** Watches the node from the wait (or the grant) on: a deletion we did not make is known at once. */
  readonly own: OwnNodeWatch;
}

/**
 * A batch of this process's callers (see Batch) behind one ephemeral sequential node. Its entry
 * token is the node's czxid, so the n-th caller's token is `(czxid << 16) + n`: the czxid, not
 * the sequence number, because the sequence restarts when an emptied parent is deleted and
 * created again, while zxids only grow over the ensemble's whole history.
 */
export class ZooKeeperBatch extends Batch {
  /** When the first caller joined: an unreachable server bounds the batch's wait from then. */
  readonly createdAt = performance.now();
  /** Aborted to take the entry back while it is on its way or queued (its callers left, close). */
  withdrawn?: LazyAbort;
  /** The session of the batch's latest node, placed or not: its node goes at the latest with it. */
  session?: ZooKeeperSession;
  /** Set while the entry holds the lock. */
  place?: QueuePlace;
  /** Stops listening for the session's death and for the node's deletion, while holding. */
  unwatch?: () => void;

  constructor(
    name: string,
    id: string,
    /** The lock name's parent node. */
    readonly parent: string,
  ) {
    super(name, id);
  }
}
