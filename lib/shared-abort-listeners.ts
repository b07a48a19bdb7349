/** What listens to a signal through `listenToAbort`. */
export interface AbortWatcher {
  /** The signal aborted, with this reason. */
  aborted(reason: unknown): void;
}

/**
 * The watchers of one source of aborts (a shared signal, a grant's loss): one, or a Set once a
 * second joins, since most have one.
 */
export class AbortWatchers {
  private one?: AbortWatcher;
  private many?: Set<AbortWatcher>;

  add(watcher: AbortWatcher): void {
    if (this.many) this.many.add(watcher);
    else if (!this.one) this.one = watcher;
    else {
      this.many = new Set([this.one, watcher]);
      this.one = undefined;
    }
  }

  delete(watcher: AbortWatcher): void {
    if (this.one === watcher) this.one = undefined;
    else this.many?.delete(watcher);
  }

  /** Tells every watcher `reason`, once: they are forgotten first, so one may stop listening meanwhile. */
  tell(reason: unknown): void {
    const watchers = this.many ? [...this.many] : this.one ? [this.one] : [];
    this.one = this.many = undefined;
    for (const watcher of watchers) watcher.aborted(reason);
  }
}

const watchersBySignal = new WeakMap<AbortSignal, AbortWatchers>();

/**
 * Tells `watcher` when `signal` aborts, until `stopListeningToAbort`. Many watchers may share a
 * signal: a backend's one `lost` signal for all its grants, or one caller signal (an app's
 * shutdown signal) passed to many calls. A listener each would cost O(watchers) per add and
 * remove (EventTarget walks its list) and make Node warn of a leak at the eleventh; so each signal
 * gets one listener, and its watchers an AbortWatchers.
 */
export function listenToAbort(signal: AbortSignal, watcher: AbortWatcher): void {
  let watchers = watchersBySignal.get(signal);
  if (!watchers) {
    const entry = new AbortWatchers();
    watchersBySignal.set(signal, (watchers = entry));
    signal.addEventListener(
      'abort',
      () => {
        watchersBySignal.delete(signal);
        entry.tell(signal.reason);
      },
      { once: true },
    );
  }
  watchers.add(watcher);
}

export function stopListeningToAbort(signal: AbortSignal, watcher: AbortWatcher): void {
  watchersBySignal.get(signal)?.delete(watcher);
}
