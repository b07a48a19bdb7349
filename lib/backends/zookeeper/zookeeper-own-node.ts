import { DistributedLockError } from '../../errors';
import { NODE_DELETED, ZkCode, zkCode } from './zookeeper-client';
import { OneShot } from './one-shot';
import type { ZooKeeperSession } from './zookeeper-session';

/**
 * A watch on our own lock node, from the moment we wait on it (or hold it, when granted at once)
 * until we delete it ourselves: a deletion we did not make (an operator, a script) is known as
 * soon as the server tells us.
 *
 * A waiter sets it just before the watch on its predecessor, pipelined with it (no extra round
 * trip on the hand-off path). ZooKeeper answers one session's requests in order and sends its
 * watch events in zxid order with the replies, so while the connection holds, our node's
 * deletion always reaches us before a later deletion of the predecessor: a waiter never takes
 * the lock with a node that is gone. A holder's renewals stand on it too (ZooKeeperRenewals).
 *
 * A holder granted at once sets it on the next turn of the event loop (`deferred`): no reply to a
 * watch sent now could be read before then, so a lock released within the turn needs none.
 */
export class OwnNodeWatch {
  private readonly deleted = new OneShot();
  private stopped = false;
  /** False once the server refused to set the watch (NO_AUTH, say): a deletion would then go unheard. */
  private watching = true;
  private cancel: () => void = () => undefined;
  /** The latest request setting the watch: once it is answered, `gone` is up to date. Unset until the first is sent. */
  private armed?: Promise<void>;
  private pendingArm?: NodeJS.Immediate;

  constructor(
    private readonly session: ZooKeeperSession,
    private readonly path: string,
    deferred = false,
  ) {
    if (deferred) this.pendingArm = setImmediate(() => this.armNow());
    else this.armed = this.arm();
  }

  /** True when our node is known to exist, as of every event and reply received so far. */
  async stillThere(): Promise<boolean> {
    await this.armNow();
    return this.deleted.reason === undefined;
  }

  /** The node is known deleted by someone else, as of every event and reply received so far. */
  get isGone(): boolean {
    return this.deleted.reason !== undefined;
  }

  /** The watch is in place, or on its way: a deletion by someone else will be told. */
  get isWatching(): boolean {
    return this.watching;
  }

  /** Calls `listener` once if the node is deleted by someone else (at once if it already was); returns an unsubscribe. */
  onGone(listener: (reason: Error) => void): () => void {
    return this.deleted.listen(listener);
  }

  /** We are deleting the node (or leaving it to the session): its deletion is no news. */
  stop(): void {
    this.stopped = true;
    clearImmediate(this.pendingArm);
    this.deleted.clear();
    this.cancel();
  }

  /** The watch's request, sent now unless it already was. */
  private armNow(): Promise<void> {
    clearImmediate(this.pendingArm);
    this.pendingArm = undefined;
    return (this.armed ??= this.arm());
  }

  private async arm(): Promise<void> {
    // A lost reply may or may not have left the watch: set it again (the client keeps one function per path).
    for (;;) {
      if (this.stopped) return;
      const { set, cancel } = this.session.watch(this.path, (event) => {
        if (event.getType() === NODE_DELETED) this.markGone();
        // Any other change (someone set data on it) used the watch up: set it again.
        else if (!this.stopped) this.armed = this.arm();
      });
      this.cancel = cancel;
      try {
        if (!(await set)) this.markGone();
        return;
      } catch (error) {
        // A dead session ends every lock of it through its own path (ZooKeeperSession.onDeath).
        if (zkCode(error) !== ZkCode.CONNECTION_LOSS) {
          this.watching = false;
          return;
        }
      }
    }
  }

  private markGone(): void {
    if (this.stopped) return;
    this.deleted.happen(new DistributedLockError(`Lock node ${this.path} was deleted by another client.`));
  }
}
