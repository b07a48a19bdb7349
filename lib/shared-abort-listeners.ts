/** The callbacks waiting on each signal: one 'abort' listener per signal, however many wait. */
const waiting = new WeakMap<AbortSignal, Set<() => void>>();

/**
 * Calls `onAbort` when `signal` aborts, until the returned function is called. A caller may pass
 * one signal (an app's shutdown signal, say) to many calls at once: a listener of its own per
 * call would make Node warn of a leak ("11 abort listeners added") at the eleventh, though each
 * is removed when its call ends. So every call shares the signal's one listener.
 */
export function whenAborted(signal: AbortSignal, onAbort: () => void): () => void {
  let callbacks = waiting.get(signal);
  if (!callbacks) {
    const created = new Set<() => void>();
    waiting.set(signal, (callbacks = created));
    signal.addEventListener(
      'abort',
      () => {
        waiting.delete(signal);
        for (const callback of [...created]) callback();
      },
      { once: true },
    );
  }
  const registered = callbacks;
  registered.add(onAbort);
  return () => void registered.delete(onAbort);
}
