import { SameTickBatchesPer } from '../same-tick-batches';
import type { QueuePlace } from './zookeeper-batch';
import type { ZooKeeperSession } from './zookeeper-session';
import type { ZooKeeperSessions } from './zookeeper-sessions';

/** One read answers any number of renewals: a tick's renewals on a session are never split. */
const ALL_AT_ONCE = Number.POSITIVE_INFINITY;

/**
 * Renewals without writes: the renewals due in one tick on one session share one read (an
 * `exists` on the root path), and each lock then stands on its own node's watch (OwnNodeWatch).
 * ZooKeeper sends a session's watch events and replies in the order it applied them, so a
 * deletion of our node applied before the read reaches us before the read's answer; that answer
 * proves the session, and so its ephemeral node, alive at that moment (see docs/zookeeper.md).
 */
export class ZooKeeperRenewals {
  private readonly reads = new SameTickBatchesPer<ZooKeeperSession, void, void>(ALL_AT_ONCE, (session, renewals) => this.heardFrom(session, renewals.length));

  constructor(
    private readonly sessions: ZooKeeperSessions,
    private readonly rootPath: string,
  ) {}

  /** True when the place's node was still ours once the session answered a read sent now; the caller checks that the session is alive. */
  async stillThere(place: QueuePlace): Promise<boolean> {
    const { session, own } = place;
    await this.reads.add(session);
    if (!(await own.stillThere())) return false;
    if (own.isWatching) return true;
    // The server refused the watch: nothing would tell of a deletion, so ask for the node itself.
    const stat = await this.sessions.bounded(session.exists(place.node.path), 'renew');
    return stat !== null && session.owns(stat);
  }

  /**
   * One read, sent and answered on one connection that was up when it was sent. The client sends
   * what was queued while it was disconnected before it sets its watches again (SET_WATCHES), so
   * such a read could overtake the deletions that replay reports: it is sent again.
   */
  private async heardFrom(session: ZooKeeperSession, renewals: number): Promise<void[]> {
    const startedAt = performance.now();
    for (;;) {
      const disconnections = session.disconnections;
      const afterReplay = session.isConnected;
      await this.sessions.bounded(session.exists(this.rootPath), 'renew', undefined, startedAt);
      if (afterReplay && session.disconnections === disconnections) return new Array<void>(renewals);
    }
  }
}
