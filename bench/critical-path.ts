import { median, signedUs } from './stats';
import type { LockRunner } from './workloads';

/** The socket of one connection, as critical-path timing patches it. */
export interface TimedSocket {
  write(...args: unknown[]): boolean;
  prependListener(event: 'data', listener: () => void): unknown;
  removeListener(event: 'data', listener: () => void): unknown;
}

/** Medians, in microseconds, of the four steps of an uncontended cycle (see criticalPath). */
export interface CriticalPath {
  /** From the acquire's write to the first data of its reply: the server, the network, the write itself. */
  acquireTrip: number;
  /** From that data to the release's write: this process, on the cycle's critical path. */
  grantToRelease: number;
  releaseTrip: number;
  /** From the release's reply to the next cycle's acquire write: this process again. */
  releasedToNext: number;
}

/**
 * Where an uncontended cycle's time goes, for a runner that makes one request per step on one
 * connection: the time of every write to the connection's socket and of every data event on it.
 * A cycle is write, data, write, data; the gaps from data to the next write are this process's
 * work that nothing overlaps, the others the server's (with the kernel and the write). Cycles
 * whose events do not follow that pattern (a renewal, a late reply) are left out.
 */
export async function criticalPath(run: LockRunner, socket: TimedSocket, name: string, cycles = 3000): Promise<CriticalPath> {
  const events: { write: boolean; at: number }[] = [];
  const write = socket.write;
  socket.write = function (this: TimedSocket, ...args: unknown[]) {
    events.push({ write: true, at: performance.now() });
    return write.apply(this, args);
  };
  const onData = () => void events.push({ write: false, at: performance.now() });
  socket.prependListener('data', onData);
  try {
    for (let i = 0; i < cycles; i++) await run(name, () => undefined);
  } finally {
    socket.write = write;
    socket.removeListener('data', onData);
  }
  const steps: number[][] = [[], [], [], []];
  for (let i = 0; i + 4 < events.length; ) {
    const cycle = events.slice(i, i + 5);
    if (!cycle.every((event, j) => event.write === (j % 2 === 0))) {
      i++;
      continue;
    }
    for (let j = 0; j < 4; j++) steps[j].push((cycle[j + 1].at - cycle[j].at) * 1000);
    i += 4;
  }
  const [acquireTrip, grantToRelease, releaseTrip, releasedToNext] = steps.map((values) => median(values));
  return { acquireTrip, grantToRelease, releaseTrip, releasedToNext };
}

/** What `ours` adds to `theirs`, in us: in the round trips, then in this process between them (`+12.0 / +30.5`). */
export function addedToPath(ours: CriticalPath, theirs: CriticalPath): string {
  const trips = ours.acquireTrip + ours.releaseTrip - theirs.acquireTrip - theirs.releaseTrip;
  const between = ours.grantToRelease + ours.releasedToNext - theirs.grantToRelease - theirs.releasedToNext;
  return `${signedUs(trips)} / ${signedUs(between)}`;
}
