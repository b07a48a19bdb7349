/**
 * `promise`, or a rejection with `signal`'s reason as soon as it aborts: a caller's wait timeout
 * or abort then bounds a step that has no deadline of its own (opening a session), while the
 * step itself goes on for the next caller.
 */
export function untilAborted<T>(promise: Promise<T>, signal: AbortSignal): Promise<T> {
  if (signal.aborted) return Promise.reject(signal.reason);
  return new Promise<T>((resolve, reject) => {
    const onAbort = () => reject(signal.reason);
    signal.addEventListener('abort', onAbort, { once: true });
    promise.then(resolve, reject).finally(() => signal.removeEventListener('abort', onAbort));
  });
}
