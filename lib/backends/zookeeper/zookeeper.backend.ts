import { DistributedLockError } from '../../errors';
import { BackendLifecycle } from '../backend-lifecycle';
import { PendingWait } from '../pending-wait';
import type { AcquireRequest, LockBackend, LockGrant } from '../lock-backend.interface';
import { NODE_DELETED, ZkCode, zkCode, type ZkModule } from './zookeeper-client';
import { LockNodes, type LockNode } from './zookeeper-lock-nodes';
import { OwnNodeWatch } from './zookeeper-own-node';
import { LockParents, PARENT_IDLE_MS } from './zookeeper-parents';
import { lockNodeName, sortedLockNodes } from './zookeeper-paths';
import type { ZooKeeperSession, ZooKeeperSessionOptions } from './zookeeper-session';
import { ZooKeeperSessions } from './zookeeper-sessions';
import { AttemptAgain, isRetryable, pause, repeatOnConnectionLoss } from './zookeeper-wait';

interface Holding {
  readonly grant: LockGrant;
  readonly path: string;
  readonly session: ZooKeeperSession;
  readonly lost: AbortController;
  releasing: boolean;
  /** Stops listening for the session's death and for our node's deletion. */
  stopWatching: () => void;
}

/** Pause before starting an acquisition again after its session died, so a dead ensemble is not hammered. */
const RETRY_PAUSE_MS = 100;

/**
 * A fair lock on ephemeral sequential nodes, as Curator's InterProcessMutex: each acquisition
 * creates `<rootPath>/<encoded name>/_c_<attempt uuid>-lock-<sequence>`; the lowest sequence
 * holds; a waiter watches only the node just before its own, and its own node. One session per
 * backend, opened in the background at creation; a lock lives exactly as long as its node, and
 * its node as long as the session.
 *
 * Round trips: acquire uncontended 1 (parent create if unknown + create/touch transaction,
 * pipelined; the watch on our own node follows, not awaited), contended 2 (+ the children list,
 * then both watches pipelined); release 1 (delete); handoff: the waiter is told by the server's
 * watch event and, when the node it watched was the head of the queue it listed, owns the lock
 * at once (0 further round trips); further back, it lists the children once more (as Curator).
 * Empty parents are removed after PARENT_IDLE_MS without use (LockParents).
 */
export class ZooKeeperLockBackend implements LockBackend {
  readonly name = 'zookeeper';
  /** Longer keys are hashed by LockService first; lockNodeName hashes encoded names above 240 chars itself. */
  readonly maxKeyBytes = 4096;
  private readonly lifecycle = new BackendLifecycle('ZooKeeper');
  private readonly sessions: ZooKeeperSessions;
  private readonly held = new Map<string, Holding>();
  /**
   * Lock nodes this backend was granted, kept while a waiter of ours watches them: such a node
   * was the head of its queue, so the waiter behind it holds when it goes, without listing the
   * queue again (a burst in one process hands over for one delete, not a delete and a list).
   */
  private readonly granted = new Set<string>();
  private readonly parents: LockParents;
  private readonly nodes: LockNodes;
  /** One per call in progress: aborted when the call ends early (its bound, close), so its work cleans up behind it. */
  private readonly calls = new Set<AbortController>();

  constructor(
    zk: ZkModule,
    private readonly options: ZooKeeperSessionOptions,
    serverTimeoutMs: number,
  ) {
    this.sessions = new ZooKeeperSessions(zk, options, serverTimeoutMs);
    this.parents = new LockParents(() => this.sessions.connected('remove an idle lock name', undefined));
    this.nodes = new LockNodes(this.parents, options.rootPath);
  }

  get address(): string {
    return this.options.address;
  }

  unreachable(): Error | undefined {
    return this.sessions.unreachable();
  }

  /** Ends with the caller's signal, or once the server has been unreachable for serverTimeoutMs during the call. */
  acquire({ key, owner, ttlMs, signal }: AcquireRequest): Promise<LockGrant> {
    return this.call('acquire', signal, async (stop) => {
      for (;;) {
        if (stop.aborted) throw stop.reason;
        try {
          return (await this.attempt(key, owner, ttlMs, stop, true))!;
        } catch (error) {
          if (stop.aborted) throw stop.reason;
          if (!isRetryable(error)) throw error;
          await pause(RETRY_PAUSE_MS, stop);
        }
      }
    });
  }

  tryAcquire({ key, owner, ttlMs }: Omit<AcquireRequest, 'signal'>): Promise<LockGrant | null> {
    return this.call('try to acquire', undefined, (stop) => this.attempt(key, owner, ttlMs, stop, false));
  }

  /** The node still exists and belongs to this session: the lock is ours as long as the session lives. */
  async renew(grant: LockGrant, _ttlMs: number): Promise<boolean> {
    const holding = this.held.get(grant.owner);
    if (!holding || holding.grant !== grant || holding.lost.signal.aborted || !holding.session.alive) return false;
    try {
      const stat = await this.sessions.bounded(holding.session.exists(holding.path), 'renew');
      if (stat && holding.session.owns(stat)) return true;
      this.lose(holding, new DistributedLockError(`Lock node ${holding.path} is gone.`));
      return false;
    } catch (error) {
      if (!holding.session.alive) return false;
      throw error;
    }
  }

  async release(grant: LockGrant): Promise<void> {
    const holding = this.held.get(grant.owner);
    if (!holding || holding.grant !== grant) return;
    this.held.delete(grant.owner);
    holding.releasing = true;
    holding.stopWatching();
    const { session, path } = holding;
    if (!session.isWatched(path)) this.granted.delete(path);
    this.parentIdle(parentOf(path), session);
    // A dead session's nodes are deleted by the server; a new session never touches them. Past
    // the bound, the delete still goes out once the connection is back (or the session ends).
    if (session.alive) await this.sessions.bounded(this.nodes.delete(session, path), 'release');
  }

  async close(): Promise<void> {
    if (!this.lifecycle.beginClose()) return;
    for (const call of this.calls) call.abort(this.lifecycle.closedWhileWaiting());
    for (const holding of this.held.values()) this.lose(holding, this.lifecycle.closedWhileHeld());
    this.held.clear();
    this.granted.clear();
    this.parents.removeIdleNow(this.sessions.existing);
    // Closing the session makes the server delete every node of it at once.
    await this.sessions.close();
  }

  /**
   * Runs `work` until it settles, or until `signal` aborts, the server stays unreachable for
   * serverTimeoutMs, or the backend closes: the call then ends at once, and `work` is told
   * through its own signal, so that a node it creates after all is deleted, a grant released.
   */
  private async call<T extends LockGrant | null>(operation: string, signal: AbortSignal | undefined, work: (stop: AbortSignal) => Promise<T>): Promise<T> {
    this.lifecycle.assertOpen();
    const ended = new AbortController();
    const stop = signal ? AbortSignal.any([signal, ended.signal]) : ended.signal;
    this.calls.add(ended);
    const running = work(stop).then((grant) => {
      // Granted as the call ended: give it back.
      if (grant && stop.aborted) this.release(grant).catch(() => undefined);
      return grant;
    });
    try {
      return await this.sessions.bounded(running, operation, stop);
    } catch (error) {
      if (!ended.signal.aborted) ended.abort(error);
      throw error;
    } finally {
      this.calls.delete(ended);
    }
  }

  /**
   * One go at the lock on one session: create our node, then wait (or, with `wait` false, give
   * up) until it is the lowest. Our node is deleted on every way out but success, and the parent
   * then left to be removed once idle.
   */
  private async attempt(key: string, owner: string, ttlMs: number, stop: AbortSignal, wait: boolean): Promise<LockGrant | null> {
    const session = await this.sessions.connected(wait ? 'acquire' : 'try to acquire', stop);
    const parent = `${this.options.rootPath}/${lockNodeName(key)}`;
    this.parents.inUse(parent);
    let node: LockNode | undefined;
    let own: OwnNodeWatch | undefined;
    try {
      const created = await this.nodes.create(session, parent, owner);
      node = created.node;
      let children = created.children ?? (await repeatOnConnectionLoss(() => session.getChildren(parent)));
      for (;;) {
        const queue = sortedLockNodes(children);
        const at = queue.indexOf(node.name);
        if (at === -1) throw new AttemptAgain(`Lock node ${node.path} vanished while waiting.`);
        if (at === 0) return await this.hold(session, key, owner, ttlMs, node, own);
        if (!wait) {
          await this.nodes.delete(session, node.path);
          node = undefined;
          this.parentIdle(parent, session);
          return null;
        }
        // Sent before the predecessor's watch, in the same pipeline: see OwnNodeWatch.
        own ??= new OwnNodeWatch(session, node.path);
        const disconnections = session.disconnections;
        const predecessor = `${parent}/${queue[at - 1]}`;
        const deleted = await this.predecessorDeleted(session, predecessor, own, stop);
        // Sequence numbers only grow, so nothing can have joined ahead of us: when the node we
        // watched was the head of the queue (the head of the list we saw, or a node this backend
        // was granted), its deletion makes us the head, no list needed, as long as our own node
        // is still there. Its watch would have told us first, unless the connection dropped
        // meanwhile (events replayed on reconnection come in no order): then list.
        const wasHead = this.granted.delete(predecessor) || at === 1;
        if (deleted && wasHead && session.disconnections === disconnections && (await own.stillThere())) {
          return await this.hold(session, key, owner, ttlMs, node, own);
        }
        children = await repeatOnConnectionLoss(() => session.getChildren(parent));
      }
    } catch (error) {
      own?.stop();
      if (node) this.nodes.delete(session, node.path).catch(() => undefined);
      this.parentIdle(parent, session);
      throw error;
    }
  }

  /**
   * Resolves true when the predecessor is deleted, false on any other change worth a fresh look
   * (another watch event, or a lost connection). Rejects with AttemptAgain when our own node is
   * deleted first, with the signal's reason when `stop` aborts, or when the session dies.
   */
  private predecessorDeleted(session: ZooKeeperSession, path: string, own: OwnNodeWatch, stop: AbortSignal): Promise<boolean> {
    const wait = new PendingWait<boolean>();
    const stopHearingDeath = session.onDeath((reason) => wait.reject(reason));
    const stopHearingGone = own.onGone((reason) => wait.reject(new AttemptAgain(reason.message)));
    const watch = session.watch(path, (event) => wait.resolve(event.getType() === NODE_DELETED));
    watch.set.then(
      (exists) => exists || wait.resolve(true),
      (error: unknown) => (zkCode(error) === ZkCode.CONNECTION_LOSS ? wait.resolve(false) : wait.reject(error)),
    );
    wait.listen(stop);
    const cleanup = () => {
      stopHearingDeath();
      stopHearingGone();
      watch.cancel();
    };
    wait.promise.then(cleanup, cleanup);
    return wait.promise;
  }

  /**
   * Nothing of ours is left under `parent`: let it be removed once idle. A dead session's node
   * is only deleted when the server expires the session, at most one session timeout from now.
   */
  private parentIdle(parent: string, session: ZooKeeperSession): void {
    this.parents.idle(parent, session.alive ? PARENT_IDLE_MS : Math.max(PARENT_IDLE_MS, session.timeoutMs));
  }

  /**
   * Our node is the lowest: the lock is ours, as long as the session lives. The grant may reach
   * us late (this process was paused with the event unread): see leaseStart.
   */
  private async hold(
    session: ZooKeeperSession,
    key: string,
    owner: string,
    ttlMs: number,
    node: LockNode,
    watching: OwnNodeWatch | undefined,
  ): Promise<LockGrant> {
    const requestedAt = await this.leaseStart(session, node, ttlMs);
    const lost = new AbortController();
    // Granted at once: watch our node from now on (not awaited; a node already gone is told by the reply).
    const own = watching ?? new OwnNodeWatch(session, node.path);
    const holding: Holding = {
      grant: { key, owner, fencingToken: node.czxid, lost: lost.signal, requestedAt },
      path: node.path,
      session,
      lost,
      releasing: false,
      stopWatching: () => undefined,
    };
    this.held.set(owner, holding);
    this.granted.add(node.path);
    // Session expiry (or silence for as long as it would take) ends every lock of the session at once.
    const stopWatchingSession = session.onDeath((reason) => this.lose(holding, reason));
    // A deletion we did not make (an operator, a script) is known at once.
    const stopWatchingNode = own.onGone((reason) => this.lose(holding, reason));
    holding.stopWatching = () => {
      stopWatchingSession();
      stopWatchingNode();
      own.stop();
    };
    return holding.grant;
  }

  /**
   * When the grant's local lease counts from (`requestedAt`). The lease is the session: the
   * server cannot expire it, and delete our node, before `lastContact + timeout` (the send time
   * of the last request it answered), so the local lease must end by then too: it counts from
   * `min(now, lastContact + timeout - ttlMs)`, which is lastContact itself when ttlMs is the
   * session timeout (the default). A longer ttlMs is cut short by the session's own liveness
   * deadline, which fires `lost`. A session not heard from for half its timeout (this process
   * was paused, or starved) is first asked, owner-checked: a grant whose session or node is gone
   * is never handed out, and the lease then counts from that request.
   */
  private async leaseStart(session: ZooKeeperSession, node: LockNode, ttlMs: number): Promise<number> {
    const now = performance.now();
    if (session.alive && now - session.lastContact <= session.timeoutMs / 2) {
      return Math.min(now, session.lastContact + Math.max(0, session.timeoutMs - ttlMs));
    }
    const sentAt = performance.now();
    const stat = await session.exists(node.path);
    if (!stat || !session.owns(stat)) throw new AttemptAgain(`Lock node ${node.path} was gone when its grant arrived.`);
    return Math.min(performance.now(), sentAt + Math.max(0, session.timeoutMs - ttlMs));
  }

  private lose(holding: Holding, reason: Error): void {
    if (holding.releasing || holding.lost.signal.aborted) return;
    holding.lost.abort(reason);
  }
}

function parentOf(path: string): string {
  return path.slice(0, path.lastIndexOf('/'));
}
