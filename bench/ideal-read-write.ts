/**
 * The read-heavy workload on an ideal FIFO read-write lock: no network, no process, every grant
 * at the instant the rule allows it. Its ratio is the most any implementation of the issue's
 * semantics (a reader behind a queued writer waits for it) can reach on this workload.
 */
export function idealReadHeavyRatio(clients: number, callersPerClient: number, callsPerCaller: number, writeEvery: number, sectionMs: number): number {
  const callers = clients * callersPerClient;
  const throughput = (readMode: boolean): number => {
    const done = new Array<number>(callers).fill(0);
    // As the bench's callers: the n-th caller of each client writes on its calls n, n + writeEvery, ...
    const isRead = (caller: number) => readMode && (done[caller] + (caller % callersPerClient)) % writeEvery !== 0;
    const queue: number[] = Array.from({ length: callers }, (_, caller) => caller);
    const holding = new Map<number, { read: boolean; until: number }>();
    let now = 0;
    let calls = 0;
    const grant = () => {
      while (queue.length > 0) {
        const read = isRead(queue[0]);
        const writerHolds = [...holding.values()].some((hold) => !hold.read);
        if (read ? writerHolds : holding.size > 0) return;
        holding.set(queue.shift()!, { read, until: now + sectionMs });
      }
    };
    grant();
    while (holding.size > 0) {
      // The earliest section to end (ties: the first granted), then whoever the rule lets go.
      const [caller, { until }] = [...holding.entries()].reduce((a, b) => (b[1].until < a[1].until ? b : a));
      now = until;
      holding.delete(caller);
      calls++;
      if (++done[caller] < callsPerCaller) queue.push(caller);
      grant();
    }
    return calls / now;
  };
  return throughput(true) / throughput(false);
}
