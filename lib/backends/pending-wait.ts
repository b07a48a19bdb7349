/**
 * One caller's wait for a grant inside a backend: it settles once, and gives up when the
 * caller's signal aborts. A late grant after it settled is the backend's to give back:
 * `resolve` returns false then.
 */
export class PendingWait<T> {
  readonly promise: Promise<T>;
  private resolveWith!: (value: T) => void;
  private rejectWith!: (reason: unknown) => void;
  private settled = false;
  private signal?: AbortSignal;
  private onAbort?: () => void;

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
  listen(signal: AbortSignal, abandoned?: () => void): boolean {
    if (this.settled) return false;
    const onAbort = () => {
      if (this.reject(signal.reason)) abandoned?.();
    };
    if (signal.aborted) {
      onAbort();
      return false;
    }
    this.signal = signal;
    this.onAbort = onAbort;
    signal.addEventListener('abort', onAbort, { once: true });
    return true;
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
    if (this.onAbort) this.signal!.removeEventListener('abort', this.onAbort);
    return true;
  }
}
