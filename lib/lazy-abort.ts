import { AbortWatchers, listenToAbort, stopListeningToAbort, type AbortWatcher } from './shared-abort-listeners';

/**
 * A one-shot abort whose AbortSignal is made only when someone asks for it: a grant's lost
 * signal, or a queued entry's withdrawal. Most never fire, and an AbortController with its
 * listeners costs more than an in-process lock cycle; what is on the lock's own path is told
 * directly (watch). Fires once.
 */
export class LazyAbort {
  private controller?: AbortController;
  private ended?: { readonly reason: unknown };
  private readonly watchers = new AbortWatchers();

  get aborted(): boolean {
    return this.ended !== undefined;
  }

  get reason(): unknown {
    return this.ended?.reason;
  }

  throwIfAborted(): void {
    if (this.ended) throw this.ended.reason;
  }

  /** Made on first access; already aborted when the abort came before. */
  get signal(): AbortSignal {
    if (!this.controller) {
      this.controller = new AbortController();
      if (this.ended) this.controller.abort(this.ended.reason);
    }
    return this.controller.signal;
  }

  /** Its signal aborts (if made), then every watcher is told, once. */
  abort(reason: unknown): void {
    if (this.ended) return;
    this.ended = { reason };
    this.controller?.abort(reason);
    this.watchers.tell(reason);
  }

  /** Tells `watcher` of the abort: at once when it already came. */
  watch(watcher: AbortWatcher): void {
    if (this.ended) return watcher.aborted(this.ended.reason);
    this.watchers.add(watcher);
  }

  unwatch(watcher: AbortWatcher): void {
    this.watchers.delete(watcher);
  }
}

/** What stops a wait: a caller's AbortSignal, or a LazyAbort, which makes none unless a slow path asks. */
export type StopSignal = AbortSignal | LazyAbort;

/** The AbortSignal of `stop`, for an API that takes one (made now for a LazyAbort). */
export function signalOf(stop: StopSignal): AbortSignal {
  return stop instanceof LazyAbort ? stop.signal : stop;
}

/** Tells `watcher` when `stop` aborts (at once when it has); no AbortSignal is made for a LazyAbort. */
export function watchStop(stop: StopSignal, watcher: AbortWatcher): void {
  if (stop instanceof LazyAbort) return stop.watch(watcher);
  if (stop.aborted) watcher.aborted(stop.reason);
  else listenToAbort(stop, watcher);
}

export function unwatchStop(stop: StopSignal, watcher: AbortWatcher): void {
  if (stop instanceof LazyAbort) stop.unwatch(watcher);
  else stopListeningToAbort(stop, watcher);
}
