/** What listens to a signal through `listenToAbort`. */
export interface AbortWatcher {
  /** The signal aborted, with this reason. */
  aborted(reason: unknown): void;
}

interface Watching {
  one?: AbortWatcher;
  many?: Set<AbortWatcher>;
}
const watchersBySignal = new WeakMap<AbortSignal, Watching>();

/**
 * Tells `watcher` when `signal` aborts, until `stopListeningToAbort`. Many watchers may share a
 * signal: a backend's one `lost` signal for all its grants, or one caller signal (an app's
 * shutdown signal) passed to many calls. A listener each would cost O(watchers) per add and
 * remove (EventTarget walks its list) and make Node warn of a leak at the eleventh; so each signal
 * gets one listener, and its watchers a Set, made only once a second one joins.
 */
export function listenToAbort(signal: AbortSignal, watcher: AbortWatcher): void {
  let watching = watchersBySignal.get(signal);
  if (!watching) {
    const entry: Watching = {};
    watchersBySignal.set(signal, (watching = entry));
    signal.addEventListener(
      'abort',
      () => {
        watchersBySignal.delete(signal);
        const watchers = entry.many ? [...entry.many] : entry.one ? [entry.one] : [];
        for (const each of watchers) each.aborted(signal.reason);
      },
      { once: true },
    );
  }
  if (watching.many) watching.many.add(watcher);
  else if (!watching.one) watching.one = watcher;
  else {
    watching.many = new Set([watching.one, watcher]);
    watching.one = undefined;
  }
}

export function stopListeningToAbort(signal: AbortSignal, watcher: AbortWatcher): void {
  const watching = watchersBySignal.get(signal);
  if (watching?.one === watcher) watching.one = undefined;
  else watching?.many?.delete(watcher);
}
