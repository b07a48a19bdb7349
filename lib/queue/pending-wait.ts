import { listenToAbort, stopListeningToAbort, type AbortWatcher } from '../shared-abort-listeners';

/**
 * One caller's wait for a grant inside a backend: it settles once, and gives up when the
 * caller's signal aborts. A late grant after it settled is the backend's to give back:
 * `resolve` returns false then.
 */
export class PendingWait<T> implements AbortWatcher {
  readonly promise: Promise<T>;
  private resolveWith!: (value: T) => void;
  private rejectWith!: (reason: unknown) => void;
  private settled = false;
  private signal?: AbortSignal;
  private abandoned?: (reason: unknown) => void;

  constructor() {
    this.promise = new Promise<T>((resolve, reject) => {
      this.resolveWith = resolve;
      this.rejectWith = reject;
    });
  }

  get isSettled(): boolean {
    return this.settled;
  }

  /**
   * From now on an abort of `signal` ends the wait with its reason, then calls `abandoned` (leave
   * the queue at the server). Looked at only once the caller must wait (see AcquireRequest.signal).
   * False when the signal had already aborted: the wait is over.
   */
  listen(signal: AbortSignal, abandoned?: (reason: unknown) => void): boolean {
    if (this.settled) return false;
    this.abandoned = abandoned;
    if (signal.aborted) {
      this.aborted(signal.reason);
      return false;
    }
    this.signal = signal;
    listenToAbort(signal, this);
    return true;
  }

  /**
   * As listen(), through the request's onStop (no AbortSignal made): from now on, whether the
   * caller must wait or not.
   */
  watch(request: { onStop(watcher: AbortWatcher): void }, abandoned: (reason: unknown) => void): void {
    this.abandoned = abandoned;
    request.onStop(this);
  }

  /** AbortWatcher: the caller's signal aborted, or its request was stopped. */
  aborted(reason: unknown): void {
    if (this.reject(reason)) this.abandoned?.(reason);
  }

  /** False when the wait had already ended: the caller must give the grant back. */
  resolve(value: T): boolean {
    if (!this.settle()) return false;
    this.resolveWith(value);
    return true;
  }

  reject(reason: unknown): boolean {
    if (!this.settle()) return false;
    this.rejectWith(reason);
    return true;
  }

  private settle(): boolean {
    if (this.settled) return false;
    this.settled = true;
    if (this.signal) stopListeningToAbort(this.signal, this);
    return true;
  }
}
