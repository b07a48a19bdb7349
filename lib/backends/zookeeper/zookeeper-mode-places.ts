import { LockConfigError } from '../../errors';
import type { AcquireRequest } from '../lock-backend.interface';
import { PendingWait } from '../../queue/pending-wait';
import { ZkCode, zkCode } from './zookeeper-client';
import type { QueuePlace } from './zookeeper-batch';
import { blockersOf, otherLimitAhead } from './zookeeper-entry-rule';
import type { LockNode, LockNodes } from './zookeeper-lock-nodes';
import { OwnNodeWatch } from './zookeeper-own-node';
import type { LockParents } from './zookeeper-parents';
import { sortedEntries } from './zookeeper-paths';
import type { QueuePlaces } from './zookeeper-queue-places';
import type { ZooKeeperSession } from './zookeeper-session';
import type { ZooKeeperSessions } from './zookeeper-sessions';
import { AttemptAgain, isRetryable, pause, repeatOnConnectionLoss } from './zookeeper-wait';

/** Pause before queueing again after a session died, so a dead ensemble is not hammered. */
const RETRY_PAUSE_MS = 100;

/** A read or permit request: one node of its own, whatever other callers of this process do. */
export type ModeRequest = Omit<AcquireRequest, 'signal'>;

/**
 * The place of one read or permit entry in its name's queue: an ephemeral sequential node whose
 * name marks its mode, holding once the entries ahead of it meet its mode's rule (blockersOf).
 * Until then it watches only the entries whose going may grant it, and its own node.
 */
export class ModePlaces {
  constructor(
    private readonly sessions: ZooKeeperSessions,
    private readonly nodes: LockNodes,
    private readonly parents: LockParents,
    private readonly places: QueuePlaces,
  ) {}

  /**
   * Resolves once the entry holds; a node lost on the way (its session died, someone deleted
   * it) is replaced on a live session, at the back. Rejects with `stop`'s reason when it
   * aborts; every way out but success deletes the node.
   */
  async take(request: ModeRequest, parent: string, stop: AbortSignal): Promise<QueuePlace> {
    for (;;) {
      if (stop.aborted) throw stop.reason;
      try {
        return (await this.once(request, parent, stop, true))!;
      } catch (error) {
        if (stop.aborted) throw stop.reason;
        if (!isRetryable(error)) throw error;
        await pause(RETRY_PAUSE_MS, stop);
      }
    }
  }

  /** One go, never waiting: the place if it holds at once, or undefined (the node is deleted again). */
  tryTake(request: ModeRequest, parent: string, stop: AbortSignal): Promise<QueuePlace | undefined> {
    return this.once(request, parent, stop, false);
  }

  private async once(request: ModeRequest, parent: string, stop: AbortSignal, wait: boolean): Promise<QueuePlace | undefined> {
    const session = await this.sessions.connected(wait ? 'acquire' : 'try to acquire', stop);
    this.parents.inUse(parent);
    let node: LockNode | undefined;
    let own: OwnNodeWatch | undefined;
    try {
      const created = await this.nodes.create(session, parent, request.owner, request.mode, request.limit);
      node = created.node;
      let children = created.children ?? (await repeatOnConnectionLoss(() => session.getChildren(parent)));
      for (;;) {
        const queue = sortedEntries(children);
        const at = queue.findIndex((entry) => entry.name === node!.name);
        if (at === -1) throw new AttemptAgain(`Lock node ${node.path} vanished while waiting.`);
        const other = request.mode === 'permit' ? otherLimitAhead(queue, at, request.limit!) : undefined;
        if (other) throw limitMismatch(request, other.limit!);
        const blockers = blockersOf(queue, at);
        if (blockers.length === 0) {
          const place = await this.places.headed(session, node, own, stop);
          own = place.own;
          // Deleted by someone else as it was granted: queue again, as a write batch does.
          if (own.isGone) throw new AttemptAgain(`Lock node ${node.path} was deleted as it was granted.`);
          return place;
        }
        if (!wait) {
          await this.nodes.delete(session, node.path);
          node = undefined;
          return undefined;
        }
        // Sent before the blockers' watches, in the same pipeline: see OwnNodeWatch.
        own ??= new OwnNodeWatch(session, node.path);
        await changeOfAny(session, blockers.map((entry) => `${parent}/${entry.name}`), own, stop);
        children = await repeatOnConnectionLoss(() => session.getChildren(parent));
      }
    } catch (error) {
      own?.stop();
      if (node) this.nodes.delete(session, node.path).catch(() => undefined);
      throw error;
    }
  }
}

/**
 * Resolves on the first change of any of `paths` (a deletion, any other event, one already
 * gone, a lost connection): the queue is then listed again, so no event needs telling apart.
 * Rejects with AttemptAgain when our own node is deleted first, with the signal's reason when
 * `stop` aborts, or when the session dies.
 */
function changeOfAny(session: ZooKeeperSession, paths: readonly string[], own: OwnNodeWatch, stop: AbortSignal): Promise<void> {
  const wait = new PendingWait<void>();
  const stopHearingDeath = session.onDeath((reason) => wait.reject(reason));
  const stopHearingGone = own.onGone((reason) => wait.reject(new AttemptAgain(reason.message)));
  const watches = paths.map((path) => session.watch(path, () => wait.resolve()));
  for (const watch of watches) {
    watch.set.then(
      (exists) => exists || wait.resolve(),
      (error: unknown) => (zkCode(error) === ZkCode.CONNECTION_LOSS ? wait.resolve() : wait.reject(error)),
    );
  }
  wait.listen(stop);
  const cleanup = () => {
    stopHearingDeath();
    stopHearingGone();
    for (const watch of watches) watch.cancel();
  };
  wait.promise.then(cleanup, cleanup);
  return wait.promise;
}

/** Permits of one name must agree on the semaphore's limit. */
export function limitMismatch(request: ModeRequest, otherLimit: number): LockConfigError {
  return new LockConfigError(
    'limit',
    `the semaphore ${JSON.stringify(request.key)} is held or queued for with limit ${otherLimit}, and this permit asks for limit ${request.limit}; every permit of a key must give the same limit.`,
  );
}
