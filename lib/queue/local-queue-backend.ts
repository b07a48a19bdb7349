import { BackendLifecycle } from '../backends/backend-lifecycle';
import type { AcquireRequest, LockGrant } from '../backends/lock-backend.interface';
import type { LazyAbort } from '../lazy-abort';
import type { Batch } from './batch';
import { LocalQueues, type BatchEntries } from './local-queues';
import { waitOf } from './pending-wait';

/** A grant the backend gave, and the batch it was served under: the one held-grant record of every queueing backend. */
export interface ServedGrant<B extends Batch> {
  readonly grant: LockGrant;
  readonly batch: B;
  /** The ttl the holder's lease has at the server once renewed for it (backends that renew per holder). */
  ttlMs?: number;
  /** Fires the grant's lost signal, for a backend that learns of a loss without asking (a session, a watch). */
  readonly lost?: LazyAbort;
}

export interface LocalQueueBackendOptions {
  /** When a batch's entry goes out after its first caller joined (see LocalQueues). Default setImmediate. */
  readonly sendSoon?: (send: () => void) => void;
  /**
   * Look at the request's signal only once the caller must wait, as AcquireRequest.signal asks:
   * an acquisition granted at once makes no AbortSignal. Default false: a signal that already
   * aborted rejects before anything is sent.
   */
  readonly signalOnlyWhenWaiting?: boolean;
  /** See LocalQueues' sendFirstAtOnce. Default false. */
  readonly sendFirstAtOnce?: boolean;
}

/**
 * What every backend that queues its callers in LocalQueues does the same way: its lifecycle,
 * acquire, the local check of tryAcquire, and release by the held grant. A backend adds its
 * BatchEntries, its batches (newBatch) and its server's try (tryTake).
 */
export abstract class LocalQueueBackend<B extends Batch> implements BatchEntries<B> {
  protected readonly lifecycle: BackendLifecycle;
  /** This process's callers by lock name, in batches behind one server entry each. */
  protected readonly queues: LocalQueues<B>;
  /** The grants of this process that are held now, by owner. */
  protected readonly held = new Map<string, ServedGrant<B>>();
  private readonly signalOnlyWhenWaiting: boolean;

  constructor(
    /** The backend as its lifecycle errors name it: 'redis', 'ZooKeeper'. */
    lifecycleName: string,
    options: LocalQueueBackendOptions = {},
  ) {
    this.lifecycle = new BackendLifecycle(lifecycleName);
    this.signalOnlyWhenWaiting = options.signalOnlyWhenWaiting ?? false;
    this.queues = new LocalQueues<B>(
      this,
      (name, id) => this.newBatch(name, id),
      () => this.lifecycle.isOpen,
      () => this.lifecycle.closedWhileWaiting(),
      options.sendSoon,
      options.sendFirstAtOnce,
    );
  }

  /** The backend's part of the hand-over (see BatchEntries). */
  abstract send(batch: B): void;
  abstract withdraw(batch: B, reason: unknown): void;
  abstract remove(batch: B): Promise<void>;
  abstract confirm(batch: B): Promise<true | Error>;
  abstract usable(batch: B): boolean;
  abstract grant(batch: B, request: AcquireRequest, handedOverForMs?: number): LockGrant;

  /** A new batch of callers for the name; `id` is unique within the process. */
  protected abstract newBatch(name: string, id: string): B;

  /** One try at the server, never queued, for a name no caller of this process queues for or holds. */
  protected abstract tryTake(request: Omit<AcquireRequest, 'signal'>): Promise<LockGrant | null>;

  /**
   * Joins this process's batch for the name (LocalQueues), bounded by the request's signal. Not
   * async: each promise layer costs an uncontended cycle its share.
   */
  acquire(request: AcquireRequest): Promise<LockGrant> {
    try {
      this.lifecycle.assertOpen();
      // The core's request is its own wait, settled by a stop directly; a plain one says so by its signal.
      if (!this.signalOnlyWhenWaiting && !waitOf(request)) request.signal.throwIfAborted();
    } catch (error) {
      return Promise.reject(error);
    }
    return this.queues.acquire(request);
  }

  /**
   * A write of a name this process already queues for or holds is busy: null without asking the
   * server. A read or permit asks the server, whose rule knows what else holds.
   */
  async tryAcquire(request: Omit<AcquireRequest, 'signal'>): Promise<LockGrant | null> {
    this.lifecycle.assertOpen();
    if ((request.mode ?? 'write') === 'write' && this.queues.has(request.key)) return null;
    return this.tryTake(request);
  }

  /** The next caller of the batch gets the lock with no round trip (LocalQueues.release); with nobody left the entry is removed. */
  release(grant: LockGrant, validForMs?: number): Promise<void> {
    const held = this.heldFor(grant);
    if (!held) return Promise.resolve();
    this.held.delete(grant.owner);
    return this.queues.release(held.batch, grant.owner, validForMs);
  }

  /** The held lock of this very grant: a stale grant of a reused owner id does not match. */
  protected heldFor(grant: LockGrant): ServedGrant<B> | undefined {
    const held = this.held.get(grant.owner);
    return held?.grant.fencingToken === grant.fencingToken ? held : undefined;
  }
}
