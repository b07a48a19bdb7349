import type { LockGrant } from './backends/lock-backend.interface';
import { unwatchStop, watchStop, type LazyAbort, type StopSignal } from './lazy-abort';
import type { AbortWatcher } from './shared-abort-listeners';

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

/**
 * A grant whose lost signal is a LazyAbort, made only when someone asks for it (most grants end
 * released, never lost): the memory backend's, and the session backends' (etcd, ZooKeeper). The
 * holders of one entry may share it.
 */
export class GrantWithLoss implements LockGrant {
  declare readonly lost: AbortSignal;

  constructor(
    readonly key: string,
    readonly owner: string,
    readonly fencingToken: bigint,
    readonly loss: LazyAbort,
    readonly requestedAt?: number,
  ) {
    Object.defineProperty(this, 'lost', LOST_PROPERTY);
  }
}

/** Tells `watcher` when `grant` is lost (at once when it already is), with no AbortSignal made for a GrantWithLoss. */
export function watchGrantLoss(grant: LockGrant, watcher: AbortWatcher): void {
  watchStop(lossOf(grant), watcher);
}

export function unwatchGrantLoss(grant: LockGrant, watcher: AbortWatcher): void {
  unwatchStop(lossOf(grant), watcher);
}

function lossOf(grant: LockGrant): StopSignal {
  return grant instanceof GrantWithLoss ? grant.loss : grant.lost;
}
