import { signalOf, type StopSignal } from '../../lazy-abort';
import type { EntryMode } from '../lock-backend.interface';
import type { ZooKeeperBatch, QueuePlace } from './zookeeper-batch';
import { blockersOf, limitMismatch, otherLimitAhead } from './zookeeper-entry-rule';
import type { LockNode, LockNodes } from './zookeeper-lock-nodes';
import { OwnNodeWatch } from './zookeeper-own-node';
import type { LockParents } from './zookeeper-parents';
import { hasDelay, isRecord, putRecord, waitOutRecords } from './zookeeper-delay-records';
import { sortedEntries } from './zookeeper-paths';
import type { ZooKeeperSession } from './zookeeper-session';
import type { ZooKeeperSessions } from './zookeeper-sessions';
import { AttemptAgain, blockerDeleted, isRetryable, pause, repeatOnConnectionLoss } from './zookeeper-wait';

/** Pause before queueing again after a session died, so a dead ensemble is not hammered. */
const RETRY_PAUSE_MS = 100;

/**
 * A batch's place in the queue of its lock name, as Curator's LockInternals takes one for a
 * caller: an ephemeral sequential node under the name's parent whose name marks the batch's
 * mode, holding once the entries ahead of it meet its mode's rule (blockersOf: for a write, none
 * ahead). Until then it watches only the entries whose deletion may grant it (a write's
 * predecessor, a read's nearest write ahead, a permit's `limit` entries just ahead), and its own node.
 */
export class QueuePlaces {
  /**
   * Nodes of this process that held the lock, kept while a waiter of ours watches them: such a
   * node was the head of its queue, so the waiter behind it holds when it goes, without listing
   * the queue again (a hand-over between two batches of this process costs one delete).
   */
  private readonly heads = new Set<string>();

  constructor(
    private readonly sessions: ZooKeeperSessions,
    private readonly nodes: LockNodes,
    private readonly parents: LockParents,
  ) {}

  /**
   * Resolves once the batch's node heads the queue. A node lost on the way (its session died,
   * someone deleted it) is replaced on a live session, at the back. `queued` is told each time
   * the server has answered a create. Rejects with `stop`'s reason when it aborts; every way
   * out but success deletes the node.
   */
  async take(batch: ZooKeeperBatch, stop: StopSignal, queued: () => void): Promise<QueuePlace> {
    for (;;) {
      if (stop.aborted) throw stop.reason;
      try {
        return (await this.once(batch, stop, true, queued))!;
      } catch (error) {
        if (stop.aborted) throw stop.reason;
        if (!isRetryable(error)) throw error;
        await pause(RETRY_PAUSE_MS, signalOf(stop));
      }
    }
  }

  /** One go, never waiting: the place if it holds at once, or undefined (the node is deleted again). */
  tryTake(batch: ZooKeeperBatch, stop: StopSignal): Promise<QueuePlace | undefined> {
    return this.once(batch, stop, false, () => undefined);
  }

  /**
   * The place holds the lock: a waiter of ours behind a write place may hold on its deletion
   * alone, since a write holds only at the head. A read or permit may hold with entries ahead.
   */
  holding(place: QueuePlace, mode: EntryMode): void {
    if (mode === 'write') this.heads.add(place.node.path);
  }

  /** The place is let go (its node deleted, or gone with its session): stop watching it. */
  leave(place: QueuePlace): void {
    place.own.stop();
    if (!place.session.isWatched(place.node.path)) this.heads.delete(place.node.path);
  }

  /** Lets a place go that will not hold: its node is deleted (a dead session's goes with it). */
  drop(place: QueuePlace): void {
    this.leave(place);
    if (place.session.alive) this.nodes.delete(place.session, place.node.path).catch(() => undefined);
  }

  clear(): void {
    this.heads.clear();
  }

  private async once(batch: ZooKeeperBatch, stop: StopSignal, wait: boolean, queued: () => void): Promise<QueuePlace | undefined> {
    const session = this.sessions.connectedNow() ?? (await this.sessions.connected(wait ? 'acquire' : 'try to acquire', stop));
    const { parent } = batch;
    this.parents.inUse(parent);
    let node: LockNode | undefined;
    let own: OwnNodeWatch | undefined;
    try {
      const created = await this.nodes.create(session, parent, entryId(batch), batch.mode, batch.limit, batch.lockDelayMs);
      node = created.node;
      batch.session = session;
      queued();
      let children = created.children ?? (await repeatOnConnectionLoss(() => session.getChildren(parent)));
      for (;;) {
        const queue = sortedEntries(children);
        const at = queue.findIndex((entry) => entry.name === node!.name);
        if (at === -1) throw new AttemptAgain(`Lock node ${node.path} vanished while waiting.`);
        if (batch.mode === 'permit') {
          const other = otherLimitAhead(queue, at, batch.limit!);
          if (other) throw limitMismatch(batch.key, batch.limit!, other.limit!);
        }
        const blockers = blockersOf(queue, at);
        if (blockers.length === 0) return this.headsNow(batch, session, children, node, own, stop) ?? (await this.head(batch, session, children, node, own, stop));
        if (!wait) {
          await this.nodes.delete(session, node.path);
          node = undefined;
          return undefined;
        }
        // Sent before the blockers' watches, in the same pipeline: see OwnNodeWatch.
        own ??= new OwnNodeWatch(session, node.path);
        const disconnections = session.disconnections;
        const paths = blockers.map((entry) => `${parent}/${entry.name}`);
        const deleted = await blockerDeleted(session, paths, own, signalOf(stop));
        // Sequence numbers only grow, so nothing can have joined ahead of us: when our one
        // blocker was the head of the queue (the head of the list we saw, or a write node of
        // this process that held), its deletion leaves nothing that blocks us, no list needed,
        // as long as our own node is still there. Its watch would have told us first, unless the
        // connection dropped meanwhile (events replayed on reconnection come in no order): then list.
        let knownHead = false;
        for (const path of paths) knownHead = this.heads.delete(path) || knownHead;
        // A head with a lock-delay may have ended by its session's expiry: then its record holds the name (list).
        const wasHead = blockers.length === 1 && (knownHead || blockers[0] === queue[0]) && !hasDelay(blockers[0].name);
        if (deleted && wasHead && session.disconnections === disconnections && (await own.stillThere())) {
          return await this.head(batch, session, [], node, own, stop);
        }
        children = await repeatOnConnectionLoss(() => session.getChildren(parent));
      }
    } catch (error) {
      own?.stop();
      if (node) this.nodes.delete(session, node.path).catch(() => undefined);
      throw error;
    }
  }

  /**
   * Our node heads the queue: it holds once no expired holder's lock-delay record is left among
   * `children` (zookeeper-delay-records.ts), and a node with a delay of its own has put its record.
   */
  private async head(batch: ZooKeeperBatch, session: ZooKeeperSession, children: readonly string[], node: LockNode, own: OwnNodeWatch | undefined, stop: StopSignal): Promise<QueuePlace> {
    await waitOutRecords(session, batch.parent, children, stop);
    const place = await this.headed(session, node, own, stop);
    if (batch.lockDelayMs > 0) await putRecord(session, batch.parent, node.name, batch.lockDelayMs);
    return place;
  }

  /**
   * head() when it has nothing to wait for, as an uncontended acquisition finds: no record among
   * `children`, no delay of its own to record, a session heard from lately. Undefined otherwise.
   */
  private headsNow(batch: ZooKeeperBatch, session: ZooKeeperSession, children: readonly string[], node: LockNode, own: OwnNodeWatch | undefined, stop: StopSignal): QueuePlace | undefined {
    if (batch.lockDelayMs > 0 || children.some(isRecord) || !this.heardFromLately(session)) return undefined;
    stop.throwIfAborted();
    return this.placed(session, node, own);
  }

  /**
   * Our node holds by its mode's rule. The news may reach us late (this process was paused with
   * the event unread): a session not heard from for half its timeout is first asked,
   * owner-checked, so a place whose session or node is gone is never taken. Either way the
   * session was alive at the server after `lastContact`, which is what a grant's lease counts from.
   */
  private async headed(session: ZooKeeperSession, node: LockNode, watching: OwnNodeWatch | undefined, stop: StopSignal): Promise<QueuePlace> {
    if (!this.heardFromLately(session)) {
      const stat = await session.exists(node.path);
      if (!stat || !session.owns(stat)) throw new AttemptAgain(`Lock node ${node.path} was gone when its grant arrived.`);
    }
    stop.throwIfAborted();
    return this.placed(session, node, watching);
  }

  /** Alive, and heard from within half its timeout: its nodes are still its own. */
  private heardFromLately(session: ZooKeeperSession): boolean {
    return session.alive && performance.now() - session.lastContact <= session.timeoutMs / 2;
  }

  private placed(session: ZooKeeperSession, node: LockNode, watching: OwnNodeWatch | undefined): QueuePlace {
    // Granted at once: watch our node from the next turn on (not awaited; a node already gone is told by the reply).
    return { session, node, own: watching ?? new OwnNodeWatch(session, node.path, true) };
  }
}

/**
 * The node's data, for operators (inspect): a write batch's id, as its callers take turns under
 * it; for a read or permit node, the owner of its first caller (a permit's only one), whom an
 * operator can recognise.
 */
function entryId(batch: ZooKeeperBatch): string {
  return batch.mode === 'write' ? batch.id : (batch.peek()?.request.owner ?? batch.id);
}
