import { listenToAbort, stopListeningToAbort, type AbortWatcher } from '../shared-abort-listeners';

/**
 * One caller's wait for a grant: it settles once, and gives up when the caller's signal aborts.
 * A late grant after it settled is the backend's to give back: `resolve` returns false then. The
 * core's own request (WaitRequest) is such a wait, so a queueing backend settles the caller's
 * wait itself, with no second promise between them.
 */
export class PendingWait<T> implements AbortWatcher {
  readonly promise: Promise<T>;
  private resolveWith!: (value: T) => void;
  private rejectWith!: (reason: unknown) => void;
  private settled = false;
  private value?: T;
  private listenedTo?: AbortSignal;
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
    this.listenedTo = signal;
    listenToAbort(signal, this);
    return true;
  }

  /**
   * As listen(), for a wait that is stopped directly (the core's WaitRequest, no AbortSignal
   * made): from now on, whether the caller must wait or not.
   */
  onAbandon(abandoned: (reason: unknown) => void): void {
    this.abandoned = abandoned;
  }


  /** AbortWatcher: the caller's signal aborted, or its request was stopped. */
  aborted(reason: unknown): void {
    if (this.reject(reason)) this.abandoned?.(reason);
  }

  /** False when the wait had already ended: the caller must give the grant back (unless it is this very value). */
  resolve(value: T): boolean {
    if (!this.settle()) return false;
    this.value = value;
    this.resolveWith(value);
    return true;
  }

  /** The wait ended with this very value (a backend wrapped around a queueing one answers with what the queue gave). */
  resolvedWith(value: T): boolean {
    return this.value === value;
  }

  reject(reason: unknown): boolean {
    if (!this.settle()) return false;
    this.rejectWith(reason);
    return true;
  }

  private settle(): boolean {
    if (this.settled) return false;
    this.settled = true;
    if (this.listenedTo) stopListeningToAbort(this.listenedTo, this);
    return true;
  }
}

/** The caller's own wait when `request` is one (the core's WaitRequest); undefined for a plain request. */
export function waitOf<T>(request: object): PendingWait<T> | undefined {
  return request instanceof PendingWait ? (request as PendingWait<T>) : undefined;
}
