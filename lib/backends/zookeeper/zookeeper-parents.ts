import { deadlines, type Deadline } from '../../deadlines';
import { ZkCode, zkCode } from './zookeeper-client';
import type { ZooKeeperSession } from './zookeeper-session';

/**
 * A released name's parent node is removed once this client has not used the name for this
 * long: removing it at every release would make the next acquisition of a busy name create it
 * again, one more fsync'd write each way.
 */
export const PARENT_IDLE_MS = 1_000;

/**
 * The persistent parent node of each lock name: which ones this client saw exist (so an
 * acquisition need not create them), and their removal once this client stops using a name.
 * ZooKeeper 3.5's container nodes would remove themselves, but the 3.4 protocol that
 * node-zookeeper-client speaks has none; docs/zookeeper.md says what can still be left behind.
 * Fencing does not care: czxid keeps growing across a parent's incarnations.
 */
export class LockParents {
  /** Parents this client saw exist; a stale entry costs one failed create and a retry. */
  private readonly known = new Set<string>();
  /** On the process's deadline scheduler: a release sets one and the next acquisition cancels it, with no Node timer each. */
  private readonly idleTimers = new Map<string, Deadline>();

  /** `sessionForRemoval`: a live session to remove parents with, opened if need be. */
  constructor(private readonly sessionForRemoval: () => Promise<ZooKeeperSession>) {}

  isKnown(parent: string): boolean {
    return this.known.has(parent);
  }

  markKnown(parent: string): void {
    this.known.add(parent);
  }

  markUnknown(parent: string): void {
    this.known.delete(parent);
  }

  /** An acquisition of the name starts: its parent stays. */
  inUse(parent: string): void {
    deadlines.cancel(this.idleTimers.get(parent));
    this.idleTimers.delete(parent);
  }

  /**
   * This client has nothing left under `parent`, or will not once `afterMs` have passed (a dead
   * session's node, which the server deletes when it expires the session): remove the parent
   * then, unless the name is used again meanwhile.
   */
  idle(parent: string, afterMs: number): void {
    this.inUse(parent);
    const timer = deadlines.add(performance.now() + afterMs, () => {
      this.idleTimers.delete(parent);
      this.sessionForRemoval().then(
        (session) => this.remove(session, parent),
        () => undefined,
      );
    });
    this.idleTimers.set(parent, timer);
  }

  /** At close: the idle parents are removed now, on `session` if it is alive (never a new one). */
  removeIdleNow(session: ZooKeeperSession | undefined): void {
    for (const [parent, timer] of this.idleTimers) {
      deadlines.cancel(timer);
      if (session?.alive) this.remove(session, parent);
    }
    this.idleTimers.clear();
  }

  /**
   * Removes the parent if it is empty; fails harmlessly (NOT_EMPTY) while others use it.
   * Forgotten first, so an acquisition racing with the removal creates it again in its pipeline.
   */
  private remove(session: ZooKeeperSession, parent: string): void {
    this.known.delete(parent);
    session.remove(parent).then(
      () => undefined,
      (error: unknown) => zkCode(error) === ZkCode.NOT_EMPTY && this.known.add(parent),
    );
  }
}
