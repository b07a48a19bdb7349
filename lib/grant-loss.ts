import type { LockGrant } from './backends/lock-backend.interface';
import { AbortWatchers, listenToAbort, stopListeningToAbort, type AbortWatcher } from './shared-abort-listeners';

/**
 * A grant's lost signal, made only when someone asks for it: most grants end released, never
 * lost, and an AbortController with its listener costs an in-process lock cycle more than the
 * rest of its grant's bookkeeping. The core's lease is told directly (watchGrantLoss). Fires
 * once; the holders of one entry may share it.
 */
export class GrantLoss {
  private controller?: AbortController;
  private ended?: { readonly reason: unknown };
  private readonly watchers = new AbortWatchers();

  /** Made on first access; already aborted when the grant was lost before. */
  get signal(): AbortSignal {
    if (!this.controller) {
      this.controller = new AbortController();
      if (this.ended) this.controller.abort(this.ended.reason);
    }
    return this.controller.signal;
  }

  /** The grant is lost: its signal aborts (if made), then every watcher is told, once. */
  abort(reason: unknown): void {
    if (this.ended) return;
    this.ended = { reason };
    this.controller?.abort(reason);
    this.watchers.tell(reason);
  }

  /** Tells `watcher` when the grant is lost: at once when it already is. */
  watch(watcher: AbortWatcher): void {
    if (this.ended) return watcher.aborted(this.ended.reason);
    this.watchers.add(watcher);
  }

  unwatch(watcher: AbortWatcher): void {
    this.watchers.delete(watcher);
  }
}

/**
 * `lost` as an own, enumerable property that makes the signal when read: a wrapping backend that
 * copies a grant (`{ ...grant, requestedAt }`) copies it too, as with a plain grant.
 */
const LOST_PROPERTY: PropertyDescriptor = {
  get(this: GrantWithLoss): AbortSignal {
    return this.loss.signal;
  },
  enumerable: true,
};

/** A grant whose lost signal is a GrantLoss: the memory backend's, and the session backends' (etcd, ZooKeeper). */
export class GrantWithLoss implements LockGrant {
  declare readonly lost: AbortSignal;

  constructor(
    readonly key: string,
    readonly owner: string,
    readonly fencingToken: bigint,
    readonly loss: GrantLoss,
    readonly requestedAt?: number,
  ) {
    Object.defineProperty(this, 'lost', LOST_PROPERTY);
  }
}

/** Tells `watcher` when `grant` is lost (at once when it already is), with no AbortSignal made for a GrantWithLoss. */
export function watchGrantLoss(grant: LockGrant, watcher: AbortWatcher): void {
  if (grant instanceof GrantWithLoss) return grant.loss.watch(watcher);
  const lost = grant.lost;
  if (lost.aborted) watcher.aborted(lost.reason);
  else listenToAbort(lost, watcher);
}

export function unwatchGrantLoss(grant: LockGrant, watcher: AbortWatcher): void {
  if (grant instanceof GrantWithLoss) grant.loss.unwatch(watcher);
  else stopListeningToAbort(grant.lost, watcher);
}
