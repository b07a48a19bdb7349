import { MAX_TIMER_MS } from './lock-defaults';

/** A deadline set with Deadlines.add, to pass to cancel. */
export interface Deadline {
  /** `performance.now()` time it fires at. */
  readonly at: number;
}

interface Entry extends Deadline {
  readonly fire: () => void;
  readonly keepsAlive: boolean;
  /** Position in the heap; -1 once fired or cancelled. */
  index: number;
}

/**
 * Many short-lived deadlines on one Node timer. Every lock sets two (its wait timeout and its
 * lease) and usually cancels both within microseconds. Node keeps its timers in lists keyed by
 * exact duration, and these durations are all different (a deadline minus now): each
 * setTimeout would make a list, put it in Node's priority queue and re-arm libuv, and each
 * clearTimeout take it down again. Measured on Redis, that was 2-4% of an uncontended cycle.
 * Here adding and cancelling are a binary heap's O(log n); the one timer is re-armed only when
 * a deadline comes before the one it is set for, and a timer that fires for deadlines since
 * cancelled just re-arms for the next one.
 */
export class Deadlines {
  private readonly heap: Entry[] = [];
  private timer?: NodeJS.Timeout;
  private timerAt = Infinity;
  /** Deadlines the process should stay alive for (a caller waiting), as a ref'd timer would. */
  private keepingAlive = 0;

  /** Runs `fire` once at `at` unless cancelled first. `keepsAlive`: the process waits for it. */
  add(at: number, fire: () => void, keepsAlive = false): Deadline {
    const entry: Entry = { at, fire, keepsAlive, index: this.heap.length };
    this.heap.push(entry);
    this.siftUp(entry.index);
    if (keepsAlive && ++this.keepingAlive === 1) this.timer?.ref();
    if (at < this.timerAt) this.arm(at);
    return entry;
  }

  cancel(deadline: Deadline | undefined): void {
    const entry = deadline as Entry | undefined;
    if (!entry || entry.index < 0) return;
    this.removeAt(entry.index);
    if (entry.keepsAlive && --this.keepingAlive === 0) this.timer?.unref();
  }

  private arm(at: number): void {
    clearTimeout(this.timer);
    this.timerAt = at;
    // Node runs a longer timer after 1 ms: a farther deadline is reached by re-arming from onTimer.
    this.timer = setTimeout(this.onTimer, Math.min(MAX_TIMER_MS, Math.max(1, Math.ceil(at - performance.now()))));
    if (this.keepingAlive === 0) this.timer.unref();
  }

  private readonly onTimer = (): void => {
    this.timer = undefined;
    this.timerAt = Infinity;
    // Timers can fire a little early (libuv's cached loop time): only what is due runs.
    while (this.heap.length > 0 && this.heap[0].at <= performance.now()) {
      const entry = this.heap[0];
      this.removeAt(0);
      if (entry.keepsAlive) this.keepingAlive--;
      entry.fire();
    }
    if (this.heap.length > 0 && this.heap[0].at < this.timerAt) this.arm(this.heap[0].at);
  };

  private removeAt(index: number): void {
    const removed = this.heap[index];
    const last = this.heap.pop()!;
    removed.index = -1;
    if (last === removed) return;
    this.heap[index] = last;
    last.index = index;
    this.siftUp(index);
    this.siftDown(last.index);
  }

  private siftUp(index: number): void {
    const entry = this.heap[index];
    while (index > 0) {
      const parentIndex = (index - 1) >> 1;
      const parent = this.heap[parentIndex];
      if (parent.at <= entry.at) break;
      this.heap[index] = parent;
      parent.index = index;
      index = parentIndex;
    }
    this.heap[index] = entry;
    entry.index = index;
  }

  private siftDown(index: number): void {
    const entry = this.heap[index];
    const length = this.heap.length;
    for (;;) {
      const left = 2 * index + 1;
      const right = left + 1;
      let smallest = index;
      let smallestAt = entry.at;
      if (left < length && this.heap[left].at < smallestAt) {
        smallest = left;
        smallestAt = this.heap[left].at;
      }
      if (right < length && this.heap[right].at < smallestAt) smallest = right;
      if (smallest === index) break;
      const moved = this.heap[smallest];
      this.heap[index] = moved;
      moved.index = index;
      index = smallest;
    }
    this.heap[index] = entry;
    entry.index = index;
  }
}

/** The process's one scheduler of lock deadlines: wait timeouts and leases. */
export const deadlines = new Deadlines();
