import { LockServerUnreachableError } from '../errors';
import { PendingWait } from '../queue/pending-wait';

/**
 * Callers waiting for what a backend opens in the background (its connection, its session), each
 * for at most its own bound: then LockServerUnreachableError, with why the server seems
 * unreachable as the cause. All go on at once when it is ready, or fail at once (at close).
 */
export class ReadyWaits<T> {
  /** Each wait, with what its caller was trying to do. */
  private readonly waits = new Map<PendingWait<T>, string>();

  constructor(
    private readonly backend: string,
    private readonly address: string,
    /** Why the server cannot be reached now, or undefined: the cause a wait that ran out reports. */
    private readonly unreachable: () => Error | undefined,
  ) {}

  /** Rejects after `timeoutMs`, or with `signal`'s reason when it aborts first. */
  wait(operation: string, timeoutMs: number, signal?: AbortSignal): Promise<T> {
    const wait = new PendingWait<T>();
    const startedAt = performance.now();
    const timer = setTimeout(() => {
      wait.reject(new LockServerUnreachableError(this.backend, operation, this.address, Math.round(performance.now() - startedAt), this.unreachable()));
    }, timeoutMs);
    this.waits.set(wait, operation);
    const done = () => {
      clearTimeout(timer);
      this.waits.delete(wait);
    };
    wait.promise.then(done, done);
    if (signal) wait.listen(signal);
    return wait.promise;
  }

  /** Every wait goes on with `value`. */
  ready(value: T): void {
    for (const wait of this.taken().keys()) wait.resolve(value);
  }

  /** Every wait fails, with `reason(operation)` for its caller's operation. */
  fail(reason: (operation: string) => unknown): void {
    for (const [wait, operation] of this.taken()) wait.reject(reason(operation));
  }

  private taken(): Map<PendingWait<T>, string> {
    const waits = new Map(this.waits);
    this.waits.clear();
    return waits;
  }
}
