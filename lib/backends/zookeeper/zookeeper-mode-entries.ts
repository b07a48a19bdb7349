import { DistributedLockError, LockConfigError } from '../../errors';
import type { AcquireRequest, LockGrant } from '../lock-backend.interface';
import { batchToken } from '../../queue/batch';
import { PendingWait } from '../../queue/pending-wait';
import { isStoppable } from '../built-in-backend';
import type { QueuePlace } from './zookeeper-batch';
import type { LockNodes } from './zookeeper-lock-nodes';
import { ModePlaces, type ModeRequest } from './zookeeper-mode-places';
import { PARENT_IDLE_MS, type LockParents } from './zookeeper-parents';
import type { QueuePlaces } from './zookeeper-queue-places';
import type { ZooKeeperRenewals } from './zookeeper-renewals';
import type { ZooKeeperSession } from './zookeeper-session';
import type { ZooKeeperSessions } from './zookeeper-sessions';

/** A read or permit entry that holds: its own node, its own grant. */
interface ModeHold {
  readonly grant: LockGrant;
  readonly lost: AbortController;
  readonly place: QueuePlace;
  /** Stops hearing of the session's death and of the node's deletion. */
  unwatch: () => void;
}

/**
 * The read and permit entries of this process: one node per caller (no batching: readers of
 * one process never wait for each other, and each permit is one of the semaphore's), each a
 * lease of its own that lives as long as its node on its session, as a write batch's node does.
 */
export class ModeEntries {
  private readonly places: ModePlaces;
  private readonly holds = new Map<string, ModeHold>();
  /** One per acquisition in progress: aborted to end it (its caller left, its bound, close). */
  private readonly pending = new Set<AbortController>();
  /** Entries of this process per lock name, waiting or holding: its parent stays while any is left. */
  private readonly perName = new Map<string, number>();
  private closed = false;

  constructor(
    private readonly sessions: ZooKeeperSessions,
    private readonly nodes: LockNodes,
    private readonly parents: LockParents,
    private readonly queuePlaces: QueuePlaces,
    private readonly renewals: ZooKeeperRenewals,
    /** The name's parent node. */
    private readonly parentOf: (key: string) => string,
    /** A write caller of this process queues for or holds the name. */
    private readonly writesUse: (key: string) => boolean,
  ) {
    this.places = new ModePlaces(sessions, nodes, parents, queuePlaces);
  }

  /** Waits for the entry to hold, bounded as the write path's waits are; an abort takes the node back. */
  acquire(request: AcquireRequest): Promise<LockGrant> {
    const wait = new PendingWait<LockGrant>();
    const invalid = invalidLimit(request);
    if (invalid) {
      wait.reject(invalid);
      return wait.promise;
    }
    const stop = new AbortController();
    const abandoned = (reason: unknown) => stop.abort(reason);
    if (isStoppable(request)) wait.watch(request, abandoned);
    else wait.listen(request.signal, abandoned);
    // Stopped before it began: nothing is sent.
    if (stop.signal.aborted) return wait.promise;
    this.start(request, stop, (signal) => this.places.take(request, this.parentOf(request.key), signal), 'acquire').then(
      (grant) => {
        // take() waits until it holds, so there is a grant; the caller left as it came: give it back.
        if (!wait.resolve(grant!)) this.release(grant!).catch(() => undefined);
      },
      (error: unknown) => wait.reject(error),
    );
    return wait.promise;
  }

  /** Holds at once or not at all; bounded as every call is. */
  tryAcquire(request: ModeRequest): Promise<LockGrant | null> {
    const invalid = invalidLimit(request);
    if (invalid) return Promise.reject(invalid);
    return this.start(request, new AbortController(), (signal) => this.places.tryTake(request, this.parentOf(request.key), signal), 'try to acquire');
  }

  /** The very grant this backend gave holds a read or permit entry. */
  has(grant: LockGrant): boolean {
    return this.holds.size !== 0 && this.holds.get(grant.owner)?.grant === grant;
  }

  /** Some entry of this process is queued for or holds the name. */
  uses(key: string): boolean {
    return this.perName.has(key);
  }

  /** The node still exists on its live session (one shared read per tick, as for write grants). */
  async renew(grant: LockGrant): Promise<boolean> {
    const hold = this.holds.get(grant.owner);
    if (!hold || hold.grant !== grant || !hold.place.session.alive) return false;
    const { place } = hold;
    try {
      const there = await this.renewals.stillThere(place);
      if (this.holds.get(grant.owner) !== hold || !place.session.alive) return false;
      if (there) return true;
      this.lose(hold, new DistributedLockError(`Lock node ${place.node.path} is gone.`));
      return false;
    } catch (error) {
      if (!place.session.alive) return false;
      throw error;
    }
  }

  /** Owner-checked and idempotent: deletes the entry's node (a dead session's goes with it), bounded. */
  async release(grant: LockGrant): Promise<void> {
    const hold = this.holds.get(grant.owner);
    if (!hold || hold.grant !== grant) return;
    this.end(hold);
    const { session, node } = hold.place;
    if (session.alive) await this.sessions.bounded(this.nodes.delete(session, node.path), 'release');
  }

  /** Ends every wait with `waitError` and every hold with `heldError`; the session's close deletes the nodes. */
  close(waitError: Error, heldError: Error): void {
    this.closed = true;
    for (const stop of this.pending) stop.abort(waitError);
    for (const hold of this.holds.values()) {
      hold.unwatch();
      hold.lost.abort(heldError);
    }
    this.holds.clear();
    this.perName.clear();
  }

  /**
   * Runs `take` under `stop`, bounded from now like the write path's acquisitions (the server
   * unreachable for serverTimeoutMs ends it); a place taken after the end is dropped behind it.
   */
  private async start(request: ModeRequest, stop: AbortController, take: (signal: AbortSignal) => Promise<QueuePlace | undefined>, operation: string): Promise<LockGrant | null> {
    this.pending.add(stop);
    this.enter(request.key);
    const taking = take(stop.signal);
    try {
      const place = await this.sessions.bounded(taking, operation, stop.signal);
      if (!place) {
        this.leave(request.key, undefined);
        return null;
      }
      return this.hold(request, place);
    } catch (error) {
      if (!stop.signal.aborted) stop.abort(error);
      taking.then((place) => place && this.queuePlaces.drop(place), () => undefined);
      this.leave(request.key, undefined);
      throw error;
    } finally {
      this.pending.delete(stop);
    }
  }

  /**
   * The grant of an entry that holds: its token is its node's czxid as a first turn, in the
   * token space of write batches. Its lease counts as a write grant's does (see the backend's grant()).
   */
  private hold({ key, owner, ttlMs }: ModeRequest, place: QueuePlace): LockGrant {
    const { session } = place;
    const lost = new AbortController();
    const requestedAt = Math.min(performance.now(), session.lastContact + Math.max(0, session.timeoutMs - ttlMs));
    const grant: LockGrant = { key, owner, fencingToken: batchToken(place.node.czxid, 0n), lost: lost.signal, requestedAt };
    const hold: ModeHold = { grant, lost, place, unwatch: () => undefined };
    this.holds.set(owner, hold);
    const stopHearingDeath = session.onDeath((reason) => this.lose(hold, reason));
    const stopHearingGone = place.own.onGone((reason) => this.lose(hold, reason));
    hold.unwatch = () => {
      stopHearingDeath();
      stopHearingGone();
      place.own.stop();
    };
    if (this.holds.get(owner) !== hold) hold.unwatch();
    return grant;
  }

  /** The entry's node is gone without our release (session dead, deleted by someone else): its holder is told now. */
  private lose(hold: ModeHold, reason: Error): void {
    if (this.holds.get(hold.grant.owner) !== hold) return;
    this.end(hold);
    hold.lost.abort(reason);
  }

  private end(hold: ModeHold): void {
    this.holds.delete(hold.grant.owner);
    hold.unwatch();
    this.leave(hold.grant.key, hold.place.session);
  }

  private enter(key: string): void {
    this.perName.set(key, (this.perName.get(key) ?? 0) + 1);
  }

  /** As the write path does: the name's parent goes once idle, when nothing of this process is left under it. */
  private leave(key: string, session: ZooKeeperSession | undefined): void {
    const left = (this.perName.get(key) ?? 1) - 1;
    if (left > 0) return void this.perName.set(key, left);
    this.perName.delete(key);
    // At close, the backend removes idle parents itself.
    if (this.closed || this.writesUse(key)) return;
    this.parents.idle(this.parentOf(key), session && !session.alive ? Math.max(PARENT_IDLE_MS, session.timeoutMs) : PARENT_IDLE_MS);
  }
}

/** A permit needs its semaphore's limit, a positive integer. */
function invalidLimit(request: ModeRequest): LockConfigError | undefined {
  if (request.mode !== 'permit') return undefined;
  const { limit } = request;
  if (typeof limit === 'number' && Number.isSafeInteger(limit) && limit >= 1) return undefined;
  return new LockConfigError('limit', `a permit of ${JSON.stringify(request.key)} needs the semaphore's limit, a positive integer; got ${String(limit)}.`);
}
