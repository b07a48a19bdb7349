import { randomUUID } from 'node:crypto';
import { DistributedLockError } from '../../errors';
import type { AcquireRequest, LockBackend, LockGrant } from '../lock-backend.interface';
import { NODE_DELETED, ZkCode, zkCode, zxidOf, type ZkModule } from './zookeeper-client';
import type { ResolvedZooKeeperOptions } from './zookeeper-options';
import { OwnNodeWatch } from './zookeeper-own-node';
import { LockParents, PARENT_IDLE_MS } from './zookeeper-parents';
import { lockNodeName, protectedPrefix, sortedLockNodes } from './zookeeper-paths';
import { ZooKeeperSession } from './zookeeper-session';
import { untilAborted } from '../until-aborted';
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

interface LockNode {
  readonly path: string;
  readonly name: string;
  readonly czxid: bigint;
}

/** Pause before starting an acquisition again after its session died, so a dead ensemble is not hammered. */
const RETRY_PAUSE_MS = 100;
/**
 * Rounds of a create that fail without a reply (CONNECTION_LOSS) or find the parent missing
 * before the acquisition fails; every lost reply is followed by a search for our node, the
 * last one too, so a create that did happen is never left behind.
 */
const CREATE_ROUNDS = 10;

/**
 * A fair lock on ephemeral sequential nodes, as Curator's InterProcessMutex: each acquisition
 * creates `<rootPath>/<encoded name>/_c_<attempt uuid>-lock-<sequence>`; the lowest sequence
 * holds; a waiter watches only the node just before its own, and its own node. One session per
 * backend; a lock lives exactly as long as its node, and its node as long as the session.
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
  private session?: ZooKeeperSession;
  private readonly held = new Map<string, Holding>();
  private readonly parents = new LockParents(() => this.liveSession(undefined));
  private readonly waits = new Set<AbortController>();
  private closed = false;

  constructor(
    private readonly zk: ZkModule,
    private readonly options: ResolvedZooKeeperOptions,
  ) {}

  async acquire({ key, owner, signal }: AcquireRequest): Promise<LockGrant> {
    this.assertOpen();
    const closing = new AbortController();
    this.waits.add(closing);
    const stop = AbortSignal.any([signal, closing.signal]);
    try {
      for (;;) {
        if (stop.aborted) throw stop.reason;
        try {
          const holding = (await this.attempt(key, owner, stop))!;
          if (!stop.aborted) return holding.grant;
          // Granted as the caller gave up: give it back at once.
          await this.release(holding.grant);
          throw stop.reason;
        } catch (error) {
          if (stop.aborted) throw stop.reason;
          if (!isRetryable(error)) throw error;
          await pause(RETRY_PAUSE_MS, stop);
        }
      }
    } finally {
      this.waits.delete(closing);
    }
  }

  async tryAcquire({ key, owner }: Omit<AcquireRequest, 'signal'>): Promise<LockGrant | null> {
    this.assertOpen();
    const holding = await this.attempt(key, owner, undefined);
    return holding?.grant ?? null;
  }

  /** The node still exists and belongs to this session: the lock is ours as long as the session lives. */
  async renew(grant: LockGrant, _ttlMs: number): Promise<boolean> {
    const holding = this.held.get(grant.owner);
    if (!holding || holding.grant !== grant || holding.lost.signal.aborted || !holding.session.alive) return false;
    try {
      const stat = await holding.session.exists(holding.path);
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
    // A dead session's nodes are deleted by the server; a new session never touches them.
    if (session.alive) await this.deleteNode(session, path);
    this.parentIdle(parentOf(path), session);
  }

  async close(): Promise<void> {
    if (this.closed) return;
    this.closed = true;
    const closedError = new DistributedLockError('The ZooKeeper lock backend was closed while waiting.');
    for (const wait of this.waits) wait.abort(closedError);
    for (const holding of this.held.values()) this.lose(holding, new DistributedLockError('The ZooKeeper lock backend was closed.'));
    this.held.clear();
    this.parents.removeIdleNow(this.session);
    // Closing the session makes the server delete every node of it at once.
    await this.session?.close();
  }

  /**
   * One go at the lock on one session: create our node, then wait (or, for tryAcquire with no
   * `stop`, give up) until it is the lowest. Our node is deleted on every way out but success,
   * and the parent then left to be removed once idle.
   */
  private async attempt(key: string, owner: string, stop: AbortSignal | undefined): Promise<Holding | null> {
    const session = await this.liveSession(stop);
    const parent = `${this.options.rootPath}/${lockNodeName(key)}`;
    this.parents.inUse(parent);
    let node: LockNode | undefined;
    let own: OwnNodeWatch | undefined;
    try {
      const created = await this.createNode(session, parent, owner);
      node = created.node;
      let children = created.children ?? (await repeatOnConnectionLoss(() => session.getChildren(parent)));
      for (;;) {
        const queue = sortedLockNodes(children);
        const at = queue.indexOf(node.name);
        if (at === -1) throw new AttemptAgain(`Lock node ${node.path} vanished while waiting.`);
        if (at === 0) return this.hold(session, key, owner, node, own);
        if (!stop) {
          await this.deleteNode(session, node.path);
          node = undefined;
          this.parentIdle(parent, session);
          return null;
        }
        // Sent before the predecessor's watch, in the same pipeline: see OwnNodeWatch.
        own ??= new OwnNodeWatch(session, node.path);
        const disconnections = session.disconnections;
        const deleted = await this.predecessorDeleted(session, `${parent}/${queue[at - 1]}`, own, stop);
        // Sequence numbers only grow, so nothing can have joined ahead of us: when the node we
        // watched was the head of the queue, its deletion makes us the head, no list needed, as
        // long as our own node is still there. Its watch would have told us first, unless the
        // connection dropped meanwhile (events replayed on reconnection come in no order): then list.
        if (deleted && at === 1 && session.disconnections === disconnections && (await own.stillThere())) {
          return this.hold(session, key, owner, node, own);
        }
        children = await repeatOnConnectionLoss(() => session.getChildren(parent));
      }
    } catch (error) {
      own?.stop();
      if (node) this.deleteNode(session, node.path).catch(() => undefined);
      this.parentIdle(parent, session);
      throw error;
    }
  }

  /**
   * Creates our lock node, in one round trip when nothing goes wrong: [create the parent if this
   * client has not seen it] + [create the node and touch the parent, one transaction], pipelined
   * on the session (the server answers in order). `children` is known without asking when the
   * node has no siblings (alone, it holds the lock); otherwise the caller lists them.
   */
  private async createNode(session: ZooKeeperSession, parent: string, owner: string): Promise<{ node: LockNode; children?: string[] }> {
    const prefix = protectedPrefix(randomUUID());
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
          const found = await this.findNode(session, parent, prefix);
          if (found) return found;
        } else if (code === ZkCode.NO_NODE) {
          this.parents.markUnknown(parent);
          if (zkCode(await ensured) === ZkCode.NO_NODE) await this.createRoot(session);
        } else {
          throw error;
        }
        if (round >= CREATE_ROUNDS) throw error;
      }
    }
  }

  private async findNode(
    session: ZooKeeperSession,
    parent: string,
    prefix: string,
  ): Promise<{ node: LockNode; children: string[] } | undefined> {
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

  private async createRoot(session: ZooKeeperSession): Promise<void> {
    let path = '';
    for (const segment of this.options.rootPath.slice(1).split('/')) {
      path += `/${segment}`;
      try {
        await repeatOnConnectionLoss(() => session.createPersistent(path));
      } catch (error) {
        if (zkCode(error) !== ZkCode.NODE_EXISTS) throw error;
      }
    }
  }

  /**
   * Resolves true when the predecessor is deleted, false on any other change worth a fresh look
   * (another watch event, or a lost connection). Rejects with AttemptAgain when our own node is
   * deleted first, with the signal's reason when `stop` aborts, or when the session dies.
   */
  private predecessorDeleted(session: ZooKeeperSession, path: string, own: OwnNodeWatch, stop: AbortSignal): Promise<boolean> {
    return new Promise<boolean>((resolve, reject) => {
      const cleanups: (() => void)[] = [];
      let settled = false;
      const settle = (outcome: () => void) => {
        if (settled) return;
        settled = true;
        for (const cleanup of cleanups) cleanup();
        outcome();
      };
      const onAbort = () => settle(() => reject(stop.reason));
      if (stop.aborted) return onAbort();
      stop.addEventListener('abort', onAbort, { once: true });
      cleanups.push(() => stop.removeEventListener('abort', onAbort));
      cleanups.push(session.onDeath((reason) => settle(() => reject(reason))));
      cleanups.push(own.onGone((reason) => settle(() => reject(new AttemptAgain(reason.message)))));
      if (settled) return;
      const watch = session.watch(path, (event) => settle(() => resolve(event.getType() === NODE_DELETED)));
      cleanups.push(watch.cancel);
      watch.set.then(
        (exists) => exists || settle(() => resolve(true)),
        (error: unknown) => {
          if (zkCode(error) === ZkCode.CONNECTION_LOSS) settle(() => resolve(false));
          else settle(() => reject(error));
        },
      );
    });
  }

  /**
   * Nothing of ours is left under `parent`: let it be removed once idle. A dead session's node
   * is only deleted when the server expires the session, at most one session timeout from now.
   */
  private parentIdle(parent: string, session: ZooKeeperSession): void {
    this.parents.idle(parent, session.alive ? PARENT_IDLE_MS : Math.max(PARENT_IDLE_MS, session.timeoutMs));
  }

  private hold(session: ZooKeeperSession, key: string, owner: string, node: LockNode, watching: OwnNodeWatch | undefined): Holding {
    const lost = new AbortController();
    // Granted at once: watch our node from now on (not awaited; a node already gone is told by the reply).
    const own = watching ?? new OwnNodeWatch(session, node.path);
    const holding: Holding = {
      grant: { key, owner, fencingToken: node.czxid, lost: lost.signal },
      path: node.path,
      session,
      lost,
      releasing: false,
      stopWatching: () => undefined,
    };
    this.held.set(owner, holding);
    // Session expiry (or silence for as long as it would take) ends every lock of the session at once.
    const stopWatchingSession = session.onDeath((reason) => this.lose(holding, reason));
    // A deletion we did not make (an operator, a script) is known at once.
    const stopWatchingNode = own.onGone((reason) => this.lose(holding, reason));
    holding.stopWatching = () => {
      stopWatchingSession();
      stopWatchingNode();
      own.stop();
    };
    return holding;
  }

  private lose(holding: Holding, reason: Error): void {
    if (holding.releasing || holding.lost.signal.aborted) return;
    holding.lost.abort(reason);
  }

  /** Deletes a node of ours; already gone is fine; a dead session's nodes go with it. */
  private async deleteNode(session: ZooKeeperSession, path: string): Promise<void> {
    try {
      await repeatOnConnectionLoss(() => session.remove(path));
    } catch (error) {
      if (zkCode(error) === ZkCode.NO_NODE || !session.alive) return;
      throw error;
    }
  }

  /** The current session, or a new one when there is none or it died. Waits for its first connection. */
  private async liveSession(stop: AbortSignal | undefined): Promise<ZooKeeperSession> {
    this.assertOpen();
    if (!this.session?.alive) this.session = new ZooKeeperSession(this.zk, this.options);
    const session = this.session;
    await (stop ? untilAborted(session.connected, stop) : session.connected);
    return session;
  }

  private assertOpen(): void {
    if (this.closed) throw new DistributedLockError('The ZooKeeper lock backend is closed.');
  }
}

function parentOf(path: string): string {
  return path.slice(0, path.lastIndexOf('/'));
}
