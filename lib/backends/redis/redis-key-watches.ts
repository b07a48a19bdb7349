import { ServerClock } from '../server-clock';

/** How long after a lease ends a waiter's safety check runs: timer lateness, not a poll. */
const EXPIRY_CHECK_MARGIN_MS = 25;

/** The safety check's period for a key: a third of the shortest waiting ttl, within [50 ms, 10 s]. */
const checkIntervalMs = (ttlMs: number) => Math.min(Math.max(ttlMs / 3, 50), 10_000);
/** A process whose checks stopped this long ago is dead to the queue: its waiters are skipped. */
const staleAfterMs = (intervalMs: number) => Math.round(intervalMs * 3 + 1_000);

/** An entry of this process waiting in a key's queue, as the safety check needs it. */
export interface WaitingEntry {
  readonly key: string;
  /** Its owner id in Redis. */
  readonly owner: string;
  readonly ttlMs: number;
}

/** This process's waiting entries on one key, and the timer of their shared safety check. */
export interface KeyWatch<E extends WaitingEntry = WaitingEntry> {
  readonly waiters: Map<string, E>;
  /**
   * The shortest ttl of the entries that joined since the watch began; it sets how often the key
   * is checked. Kept as entries leave (a check a little more often than needed is harmless), so
   * many entries cost O(1) each, not a scan of the others.
   */
  shortestTtlMs: number;
  timer?: NodeJS.Timeout;
  /** performance.now() the timer fires at. */
  checkAt: number;
  /**
   * The server's clock as replies on this key tell it: on Cluster each key's node has its own,
   * and a grant of this key is timed by that node.
   */
  readonly clock: ServerClock;
}

/**
 * The keys this process has waiters on, each with one safety-check timer (see the check scripts
 * of redis-lock-scripts.ts and redis-mode-scripts.ts). `check` runs them for a key; it is the backend's.
 */
export class KeyWatches<E extends WaitingEntry> {
  private readonly watches = new Map<string, KeyWatch<E>>();

  constructor(private readonly check: (key: string, watch: KeyWatch<E>) => void) {}

  get(key: string): KeyWatch<E> | undefined {
    return this.watches.get(key);
  }

  keys(): IterableIterator<string> {
    return this.watches.keys();
  }

  add(entry: E): KeyWatch<E> {
    let watch = this.watches.get(entry.key);
    if (!watch) this.watches.set(entry.key, (watch = { waiters: new Map(), shortestTtlMs: Infinity, checkAt: Infinity, clock: new ServerClock() }));
    watch.waiters.set(entry.owner, entry);
    watch.shortestTtlMs = Math.min(watch.shortestTtlMs, entry.ttlMs);
    return watch;
  }

  remove(key: string, owner: string): void {
    const watch = this.watches.get(key);
    if (!watch) return;
    watch.waiters.delete(owner);
    if (watch.waiters.size > 0) return;
    clearTimeout(watch.timer);
    this.watches.delete(key);
  }

  /**
   * Schedules the key's safety check: just after the holder's lease would end (a holder that
   * died is noticed then, not a poll later), and at least every checkIntervalMs to stay alive.
   */
  schedule(key: string, ownerPttlMs: number, delayMs?: number): void {
    const watch = this.watches.get(key);
    if (!watch) return;
    const interval = checkIntervalMs(watch.shortestTtlMs);
    const delay = delayMs ?? (ownerPttlMs >= 0 ? Math.min(interval, ownerPttlMs + EXPIRY_CHECK_MARGIN_MS) : interval);
    const at = performance.now() + delay;
    // A check already due sooner serves this one too: a burst of waiters sets one timer, not one each.
    if (watch.timer && watch.checkAt <= at) return;
    clearTimeout(watch.timer);
    watch.checkAt = at;
    watch.timer = setTimeout(() => {
      watch.timer = undefined;
      this.check(key, watch);
    }, delay);
    watch.timer.unref();
  }

  /** How long the queue keeps this process's waiters on `key` (with ttl `ttlMs`) after its last check. */
  staleAfter(key: string, ttlMs: number): number {
    const watch = this.watches.get(key);
    return staleAfterMs(checkIntervalMs(watch ? Math.min(ttlMs, watch.shortestTtlMs) : ttlMs));
  }

  /** Stops every timer (the backend closed). */
  clear(): void {
    for (const watch of this.watches.values()) clearTimeout(watch.timer);
    this.watches.clear();
  }
}
