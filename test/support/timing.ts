/**
 * The bound of a suite that stops, pauses, kills or restarts servers: below the runner's 120 s
 * per file (scripts/test.js), so that a test that hangs is failed by name and the suite's
 * `after` hooks still stop its servers, rather than the whole file being cancelled unexplained.
 */
export const FAULT_SUITE_TIMEOUT_MS = 90_000;

export const sleep = (ms: number) => new Promise<void>((resolve) => setTimeout(resolve, ms));

/**
 * Resolves when `condition` holds, checked every `pollMs`; rejects after `timeoutMs`. A check that
 * asks a server may want its own pace. `what` can be built at the failure, to say what was found
 * then. Test-side only.
 */
export async function eventually(
  condition: () => boolean | Promise<boolean>,
  timeoutMs: number,
  what: string | (() => string | Promise<string>),
  pollMs = 5,
): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!(await condition())) {
    if (Date.now() > deadline) throw new Error(`timed out after ${timeoutMs} ms waiting for ${typeof what === 'string' ? what : await what()}`);
    await sleep(pollMs);
  }
}

/**
 * Resolves when `signal` aborts; rejects after `timeoutMs`. The lease timers are unref'd (a held
 * lock must not keep a process alive), so a test waiting on a signal alone needs a ref'd timer.
 */
export function abortedWithin(signal: AbortSignal, timeoutMs: number): Promise<void> {
  return new Promise((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error(`signal did not fire within ${timeoutMs} ms`)), timeoutMs);
    const done = () => {
      clearTimeout(timer);
      resolve();
    };
    if (signal.aborted) return done();
    signal.addEventListener('abort', done, { once: true });
  });
}

/** A hold interval recorded inside a critical section, for the no-overlap check. */
export interface HoldInterval {
  start: bigint;
  end: bigint;
  fencingToken: bigint;
  holder: string;
}

/**
 * Throws unless the intervals are disjoint and tokens increase in the order the holds began
 * (`tokens: false` for a backend without fencing tokens).
 */
export function assertExclusive(intervals: HoldInterval[], { tokens = true } = {}): void {
  const sorted = [...intervals].sort((a, b) => (a.start < b.start ? -1 : a.start > b.start ? 1 : 0));
  for (let i = 1; i < sorted.length; i++) {
    const previous = sorted[i - 1];
    const current = sorted[i];
    if (current.start < previous.end) {
      throw new Error(`holds overlap: ${previous.holder} [${previous.start}, ${previous.end}] and ${current.holder} [${current.start}, ${current.end}]`);
    }
    if (tokens && current.fencingToken <= previous.fencingToken) {
      throw new Error(`fencing token did not increase: ${previous.holder} had ${previous.fencingToken}, then ${current.holder} got ${current.fencingToken}`);
    }
  }
}

/** The most intervals that overlap at one moment (an interval ends before one that starts at its end). */
export function mostAtOnce<T extends number | bigint>(intervals: readonly { readonly start: T; readonly end: T }[]): number {
  const events = intervals.flatMap((interval) => [
    { at: interval.start, delta: 1 },
    { at: interval.end, delta: -1 },
  ]);
  events.sort((a, b) => (a.at < b.at ? -1 : a.at > b.at ? 1 : a.delta - b.delta));
  let inside = 0;
  let most = 0;
  for (const event of events) most = Math.max(most, (inside += event.delta));
  return most;
}

/**
 * A meeting point for holders that should be able to hold together (readers, permits): each
 * calls `join()` once granted and holds on once it resolves, so whether they overlap depends on
 * the lock, not on how fast a loaded machine wakes each of them. The first `count` to join wait
 * for one another; later ones go on at once. It also resolves after `giveUpMs`, so a lock that
 * never grants them together ends the test with too few at once rather than hanging it.
 */
export function meetingOf(count: number, giveUpMs = 5_000): { join(): Promise<void> } {
  let joined = 0;
  let open!: () => void;
  const met = new Promise<void>((resolve) => (open = resolve));
  const timer = setTimeout(open, giveUpMs);
  void met.then(() => clearTimeout(timer));
  return {
    join() {
      if (++joined === count) open();
      return joined <= count ? met : Promise.resolve();
    },
  };
}
