import { DistributedLockError, LockConfigError } from '../../errors';
import { GrantWithLoss } from '../../grant-loss';
import { LazyAbort, type StopSignal } from '../../lazy-abort';
import type { AcquireRequest, EntryMode, LockBackend, LockGrant, LockInspection } from '../lock-backend.interface';
import { LocalQueueBackend, type ServedGrant } from '../../queue/local-queue-backend';
import type { ZkModule, ZkStat } from './zookeeper-client';
import { ZooKeeperBatch, type QueuePlace } from './zookeeper-batch';
import { invalidLimit } from './zookeeper-entry-rule';
import { recordHolder } from './zookeeper-holder-record';
import { ZooKeeperInspector } from './zookeeper-inspect';
import { LockNodes } from './zookeeper-lock-nodes';
import { LockParents, PARENT_IDLE_MS } from './zookeeper-parents';
import { hasDelay, recordOf } from './zookeeper-delay-records';
import { lockNodeName } from './zookeeper-paths';
import { lockDelayRefusal, modeRefusal, modesOf } from './zookeeper-protocol';
import { QueuePlaces } from './zookeeper-queue-places';
import { ZooKeeperRenewals } from './zookeeper-renewals';
import type { ZooKeeperSession, ZooKeeperSessionOptions } from './zookeeper-session';
import { ZooKeeperSessions } from './zookeeper-sessions';

const RESOLVED: Promise<void> = Promise.resolve();

/**
 * A fair lock on ephemeral sequential nodes, as Curator's InterProcessMutex: a node
 * `<rootPath>/<encoded name>/_c_<attempt uuid>-<mode>-<sequence>` per queued batch of this
 * process's callers (LocalQueues), holding by its mode's rule (a write when lowest), each batch
 * watching only the nodes whose deletion may grant it, and its own node. The callers of a write
 * batch take turns while its node holds, with no round trip between them, a read batch's all hold
 * at once; the fencing token is `(czxid << 16) + turn`. One session per backend, opened in the
 * background at creation; a node lives as long as its session. With protocol 'curator' the nodes
 * are named as Curator's InterProcessMutex or InterProcessReadWriteLock names them (NodeLayout),
 * and the modes are the recipe's.
 */
export class ZooKeeperLockBackend extends LocalQueueBackend<ZooKeeperBatch> implements LockBackend {
  readonly name = 'zookeeper';
  /** Longer keys are hashed by LockService first; lockNodeName hashes encoded names above 240 chars itself. */
  readonly maxKeyBytes = 4096;
  readonly modes: readonly EntryMode[];
  private readonly sessions: ZooKeeperSessions;
  private readonly parents: LockParents;
  private readonly nodes: LockNodes;
  private readonly places: QueuePlaces;
  private readonly inspector: ZooKeeperInspector;
  private readonly renewals: ZooKeeperRenewals;
  /** One per tryAcquire in progress: aborted when the call ends early (its bound, close), so its work cleans up behind it. */
  private readonly tries = new Set<AbortController>();

  constructor(
    zk: ZkModule,
    private readonly options: ZooKeeperSessionOptions,
    serverTimeoutMs: number,
    /** The module's holderDescription, kept once per session for inspect(); none: not kept. */
    holderDescription?: string,
  ) {
    super('ZooKeeper');
    this.modes = modesOf(options);
    this.sessions = new ZooKeeperSessions(zk, options, serverTimeoutMs, (session) => {
      if (holderDescription !== undefined) recordHolder(session, this.nodes, options.rootPath, holderDescription);
    });
    this.parents = new LockParents(() => this.sessions.connected('remove an idle lock name', undefined));
    this.nodes = new LockNodes(this.parents, options.rootPath, options);
    this.places = new QueuePlaces(this.sessions, this.nodes, this.parents);
    this.inspector = new ZooKeeperInspector(this.sessions, options.rootPath);
    this.renewals = new ZooKeeperRenewals(this.sessions, options.rootPath);
  }

  /** LockService refuses a mode outside `modes` with this message, before any I/O. */
  modeRefusal(mode: EntryMode): string | undefined {
    return modeRefusal(this.options, mode);
  }

  /** A holder's persistent delay record beside its node (zookeeper-delay-records.ts), in the native layout. */
  readonly lockDelay = true;
  lockDelayRefusal(mode: EntryMode): string | undefined {
    return lockDelayRefusal(this.options, mode);
  }

  /** Every mode joins this process's batches (LocalQueues); a permit without a valid limit is refused first. */
  override acquire(request: AcquireRequest): Promise<LockGrant> {
    const refused = this.refusal(request);
    if (refused) return Promise.reject(refused);
    if (request.mode === 'permit') {
      const invalid = invalidLimit(request);
      if (invalid) return Promise.reject(invalid);
    }
    return super.acquire(request);
  }

  override async tryAcquire(request: Omit<AcquireRequest, 'signal'>): Promise<LockGrant | null> {
    const refused = this.refusal(request);
    if (refused) throw refused;
    if (request.mode === 'permit') {
      const invalid = invalidLimit(request);
      if (invalid) throw invalid;
    }
    return super.tryAcquire(request);
  }

  /** A caller that bypasses LockService (a custom wrapper) still gets the layout's refusal, not a node Curator would misread. */
  private refusal(request: Pick<AcquireRequest, 'mode'>): LockConfigError | undefined {
    const refusal = modeRefusal(this.options, request.mode ?? 'write');
    return refusal ? new LockConfigError('backend', refusal) : undefined;
  }

  get address(): string {
    return this.options.address;
  }

  unreachable(): Error | undefined {
    return this.sessions.unreachable();
  }

  /**
   * `exists` on the root path through a connected session (opened if need be): one read, the
   * cheapest call the server answers. Bounded as every call is.
   */
  async ping(): Promise<void> {
    this.lifecycle.assertOpen();
    const session = await this.sessions.connected('answer a ping', undefined);
    await this.sessions.bounded(session.exists(this.options.rootPath), 'answer a ping');
  }

  /** A node of its own, deleted again unless it holds at once (takeIfLowest), bounded as every call is. */
  protected async tryTake(request: Omit<AcquireRequest, 'signal'>): Promise<LockGrant | null> {
    const ended = new AbortController();
    this.tries.add(ended);
    const running = this.takeIfLowest(request, ended.signal).then((grant) => {
      // Granted as the call ended: give it back.
      if (grant && ended.signal.aborted) this.release(grant).catch(() => undefined);
      return grant;
    });
    try {
      return await this.sessions.bounded(running, 'try to acquire', ended.signal);
    } catch (error) {
      if (!ended.signal.aborted) ended.abort(error);
      throw error;
    } finally {
      this.tries.delete(ended);
    }
  }

  /**
   * The node still exists on its live session: the lock is ours as long as the session lives.
   * Renewals due in one tick share one read, and no write (ZooKeeperRenewals). The lease is the
   * session's, shared by every holder of a read node, and a renewal only checks it: renewing for
   * one reader can never shorten another's.
   */
  async renew(grant: LockGrant): Promise<boolean> {
    const held = this.heldFor(grant);
    if (!held) return false;
    const place = held.batch.place;
    if (!place || !place.session.alive) return false;
    try {
      const there = await this.renewals.stillThere(place);
      // Lost or let go while the read was on its way: entryLost or release has dealt with it.
      if (held.batch.place !== place || !place.session.alive) return false;
      if (there) return true;
      this.entryLost(held.batch, new DistributedLockError(`Lock node ${place.node.path} is gone.`));
      return false;
    } catch (error) {
      if (!place.session.alive) return false;
      throw error;
    }
  }

  /** The queue under the name, read from the server (ZooKeeperInspector). */
  async inspect(key: string): Promise<LockInspection> {
    this.lifecycle.assertOpen();
    return this.inspector.inspect(key);
  }

  /** Deletes the holder's node, whoever holds it (ZooKeeperInspector). */
  async forceRelease(key: string): Promise<boolean> {
    this.lifecycle.assertOpen();
    return this.inspector.forceRelease(key);
  }

  async close(): Promise<void> {
    if (!this.lifecycle.beginClose()) return;
    const waitError = this.lifecycle.closedWhileWaiting();
    for (const call of this.tries) call.abort(waitError);
    for (const batch of this.queues.batches()) batch.unwatch?.();
    this.queues.closeAll(waitError);
    const heldError = this.lifecycle.closedWhileHeld();
    for (const held of this.held.values()) held.lost?.abort(heldError);
    this.held.clear();
    this.places.clear();
    this.parents.removeIdleNow(this.sessions.existing);
    // Closing the session makes the server delete every node of it at once.
    await this.sessions.close();
  }

  /**
   * BatchEntries: queues the batch's node and waits until it holds by its mode's rule. Ends with
   * its callers (withdraw), or once the server has been unreachable for serverTimeoutMs since the
   * batch's first caller came; a node placed after that is deleted behind it.
   */
  send(batch: ZooKeeperBatch): void {
    // No AbortController: only a wait that has to block or pause makes the withdrawal's signal.
    const stop = new LazyAbort();
    batch.withdrawn = stop;
    const queued = () => this.queues.sent(batch, true);
    // A permit batch is a single caller: the process's next permits need not wait a round trip
    // each for this create. The session's creates are answered in order, so the nodes still
    // queue in the order their callers came (next tick: no recursion through the name's queue).
    if (batch.mode === 'permit') process.nextTick(queued);
    const placed = this.places.take(batch, stop, queued);
    this.sessions.bounded(placed, 'acquire', stop, batch.createdAt).then(
      (place) => this.startHolding(batch, place, stop),
      (error: unknown) => {
        if (!stop.aborted) stop.abort(error);
        placed.then((place) => this.places.drop(place), () => undefined);
        this.queues.end(batch, error);
        this.parentIdle(batch, batch.session);
      },
    );
  }

  /** BatchEntries: the batch's callers all left, or the backend closes. */
  withdraw(batch: ZooKeeperBatch, reason: unknown): void {
    batch.withdrawn?.abort(reason);
  }

  /** BatchEntries: the node goes (bounded like any call), and with it the lock, to the next batch in the queue. */
  remove(batch: ZooKeeperBatch): Promise<void> {
    const place = batch.place;
    if (!place) return RESOLVED;
    this.stopHolding(batch);
    this.parentIdle(batch, place.session);
    // A dead session's nodes are deleted by the server. Past the bound, the delete still goes
    // out once the connection is back (or the node goes with the session).
    if (!place.session.alive) return RESOLVED;
    const deleted = hasDelay(place.node.name)
      ? this.nodes.deleteWithRecord(place.session, place.node.path, `${batch.parent}/${recordOf(place.node.name)}`)
      : this.nodes.delete(place.session, place.node.path);
    // Not async: every release takes this path (LocalQueues turns a throw into a rejection).
    return this.sessions.bounded(deleted, 'release');
  }

  /**
   * BatchEntries: a holder let go without knowing its lease valid: our node still exists, on our
   * session (then it still holds: nothing joins ahead of a node). A node found gone is
   * queued again (entryLost), as is one whose session died meanwhile.
   */
  async confirm(batch: ZooKeeperBatch): Promise<true | Error> {
    const place = batch.place!;
    let stat: ZkStat | null;
    try {
      stat = await this.sessions.bounded(place.session.exists(place.node.path), 'keep its place in the queue');
    } catch (error) {
      // Lost meanwhile, the batch queues again: LocalQueues serves it once its new node holds.
      if (batch.place !== place) return true;
      this.queues.end(batch, error);
      void this.remove(batch).catch(() => undefined);
      return error as Error;
    }
    if (batch.place === place && !(stat && place.session.owns(stat))) this.entryLost(batch, new DistributedLockError(`Lock node ${place.node.path} is gone.`));
    return true;
  }

  /** BatchEntries: false once the session died or the node is gone; entryLost has then dealt with the batch. */
  usable(batch: ZooKeeperBatch): boolean {
    const place = batch.place;
    return place !== undefined && place.session.alive && !place.own.isGone;
  }

  /**
   * BatchEntries: the grant of a caller served under the batch's node. The lease is the session,
   * which the server cannot expire before `lastContact + timeout`: the local lease counts from
   * `min(now, lastContact + timeout - ttlMs)`, so it never outlives the session (with ttlMs equal
   * to the session timeout, the default, that is lastContact itself).
   */
  grant(batch: ZooKeeperBatch, { key, owner, ttlMs }: Pick<AcquireRequest, 'key' | 'owner' | 'ttlMs'>): LockGrant {
    const { session } = batch.place!;
    const lost = new LazyAbort();
    const requestedAt = Math.min(performance.now(), session.lastContact + Math.max(0, session.timeoutMs - ttlMs));
    const grant = new GrantWithLoss(key, owner, batch.token(), lost, requestedAt);
    this.held.set(owner, { grant, lost, batch });
    return grant;
  }

  protected newBatch(name: string, id: string): ZooKeeperBatch {
    return new ZooKeeperBatch(name, id, `${this.options.rootPath}/${lockNodeName(name)}`);
  }

  private async takeIfLowest(request: Omit<AcquireRequest, 'signal'>, stop: AbortSignal): Promise<LockGrant | null> {
    const batch = this.newBatch(request.key, request.owner);
    batch.mode = request.mode ?? 'write';
    batch.limit = request.limit;
    batch.lockDelayMs = request.lockDelayMs ?? 0;
    const place = await this.places.tryTake(batch, stop).catch((error: unknown) => {
      this.parentIdle(batch, batch.session);
      throw error;
    });
    if (!place) {
      this.parentIdle(batch, batch.session);
      return null;
    }
    if (stop.aborted || !this.watchHolding(batch, place)) {
      this.places.drop(place);
      this.parentIdle(batch, place.session);
      throw stop.reason ?? new DistributedLockError(`Lock node ${place.node.path} was lost as it was granted.`);
    }
    // Batches of this process that queued meanwhile put their node after ours: they wait for this one.
    this.queues.adopt(batch, place.node.czxid, request);
    return this.grant(batch, request);
  }

  /** The batch's node holds: its callers are served (LocalQueues.holds). */
  private startHolding(batch: ZooKeeperBatch, place: QueuePlace, stop: StopSignal): void {
    if (stop.aborted) {
      this.places.drop(place);
      this.queues.end(batch, stop.reason);
      return this.parentIdle(batch, place.session);
    }
    // Its session died or its node went since it was found at the head: queue again.
    if (!this.watchHolding(batch, place)) return this.send(batch);
    this.queues.holds(batch, place.node.czxid);
  }

  /**
   * From now on, the session's death or the node's deletion by someone else ends the batch's
   * hold at once (entryLost). False, watching nothing, when either already happened.
   */
  private watchHolding(batch: ZooKeeperBatch, place: QueuePlace): boolean {
    if (!place.session.alive || place.own.isGone) {
      this.places.leave(place);
      return false;
    }
    batch.place = place;
    this.places.holding(place, batch.mode);
    const stopHearingDeath = place.session.onDeath((reason) => this.entryLost(batch, reason));
    const stopHearingGone = place.own.onGone((reason) => this.entryLost(batch, reason));
    batch.unwatch = () => {
      stopHearingDeath();
      stopHearingGone();
      this.places.leave(place);
    };
    return true;
  }

  private stopHolding(batch: ZooKeeperBatch): void {
    batch.unwatch?.();
    batch.unwatch = undefined;
    batch.place = undefined;
  }

  /**
   * The holding batch's node is gone (session expired or silent for as long as it could be, or
   * deleted by someone else): its holders (several under a read node) are told now, and the
   * callers still waiting queue again.
   */
  private entryLost(batch: ZooKeeperBatch, reason: Error): void {
    const place = batch.place;
    if (batch.state !== 'holding' || !place) return;
    this.stopHolding(batch);
    for (const owner of batch.holders) {
      const holder = this.held.get(owner);
      if (holder?.batch !== batch) continue;
      this.held.delete(owner);
      holder.lost?.abort(reason);
    }
    this.queues.requeue(batch);
    this.parentIdle(batch, place.session);
  }

  /**
   * When nothing of this process is left under the name's parent (no batch of the name: a batch
   * that queues again still is one), let it be removed once idle. A dead
   * session's node is only deleted when the server expires the session, at most one session
   * timeout from now.
   */
  private parentIdle(batch: ZooKeeperBatch, session: ZooKeeperSession | undefined): void {
    if (this.queues.has(batch.key)) return;
    this.parents.idle(batch.parent, session && !session.alive ? Math.max(PARENT_IDLE_MS, session.timeoutMs) : PARENT_IDLE_MS);
  }

  /** Only the very grant object this backend gave matches, not a copy of it. */
  protected override heldFor(grant: LockGrant): ServedGrant<ZooKeeperBatch> | undefined {
    const held = super.heldFor(grant);
    return held?.grant === grant ? held : undefined;
  }
}
