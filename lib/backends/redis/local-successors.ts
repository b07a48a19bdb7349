/**
 * Which waiter of this process stands right behind which owner id of this process in a Redis
 * queue (a holder, or a waiter not granted yet), as the acquire script said when the waiter
 * queued. When such a holder lets go, the waiter is the next owner whatever else is queued, so
 * the backend hands the lock over at once instead of through Redis and back (see
 * RedisLockBackend.release): a burst of one process's callers then moves at the speed of the
 * process, with FIFO kept.
 *
 * Links only ever point at the entry right before a waiter: when a waiter gives up, the one
 * behind it moves up to whatever stood before it (its entry is skipped in Redis too).
 */
export class LocalSuccessors {
  /** owner id -> the waiter right behind it. */
  private readonly behind = new Map<string, string>();
  /** waiter -> the owner id right before it. */
  private readonly ahead = new Map<string, string>();

  link(before: string, waiter: string): void {
    this.behind.set(before, waiter);
    this.ahead.set(waiter, before);
  }

  /** The holder `owner` lets go: the waiter right behind it, unlinked, if any. */
  takeSuccessor(owner: string): string | undefined {
    const waiter = this.behind.get(owner);
    if (waiter === undefined) return undefined;
    this.behind.delete(owner);
    this.ahead.delete(waiter);
    return waiter;
  }

  /** The waiter got the lock some other way (a grant message): it no longer stands behind anyone. */
  granted(waiter: string): void {
    const before = this.ahead.get(waiter);
    if (before === undefined) return;
    this.ahead.delete(waiter);
    if (this.behind.get(before) === waiter) this.behind.delete(before);
  }

  /** The waiter gave up: the one behind it now stands behind the one before it. */
  left(waiter: string): void {
    const before = this.ahead.get(waiter);
    const after = this.behind.get(waiter);
    this.forget(waiter);
    if (before !== undefined && after !== undefined) this.link(before, after);
  }

  /** Drops every link of `owner` (it was put back at the tail of the queue, or released). */
  forget(owner: string): void {
    const before = this.ahead.get(owner);
    const after = this.behind.get(owner);
    if (before !== undefined && this.behind.get(before) === owner) this.behind.delete(before);
    if (after !== undefined && this.ahead.get(after) === owner) this.ahead.delete(after);
    this.ahead.delete(owner);
    this.behind.delete(owner);
  }

  clear(): void {
    this.behind.clear();
    this.ahead.clear();
  }
}
