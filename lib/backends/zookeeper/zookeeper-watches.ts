import type { ZkEvent, ZkWatcher } from './zookeeper-client';

interface PathWatch {
  /** The one function the client is given for this path, however many waits register it. */
  readonly watcher: ZkWatcher;
  readonly listeners: Set<ZkWatcher>;
}

/**
 * node-zookeeper-client keeps every watcher function it is given for a path until that node
 * changes (in an EventEmitter per path, which warns past 10), and offers no way to take one back:
 * a wait that gives up before the change would leave its function behind, and many short waits
 * behind a long-held lock would pile them up. So each path gets one function per client, which
 * the client keeps only once however often it is registered, and which calls the listeners
 * present when the event comes; a wait that gives up only leaves the set.
 */
export class NodeWatches {
  private readonly byPath = new Map<string, PathWatch>();

  /** The function to register for `path`, with `listener` among those it will call once. */
  add(path: string, listener: ZkWatcher): { watcher: ZkWatcher; remove: () => void } {
    const entry = this.byPath.get(path) ?? this.entryFor(path);
    entry.listeners.add(listener);
    return { watcher: entry.watcher, remove: () => entry.listeners.delete(listener) };
  }

  isWatched(path: string): boolean {
    return (this.byPath.get(path)?.listeners.size ?? 0) > 0;
  }

  /**
   * The node is gone, so the client holds no function for it that will ever be called again
   * (a watch left on it fired before the server said so): forget the path unless a listener
   * is still there to hear that event.
   */
  forget(path: string): void {
    if (this.byPath.get(path)?.listeners.size === 0) this.byPath.delete(path);
  }

  private entryFor(path: string): PathWatch {
    const listeners = new Set<ZkWatcher>();
    const watcher = (event: ZkEvent) => {
      // The client has dropped this function now; a later registration gets a new one.
      if (this.byPath.get(path) === entry) this.byPath.delete(path);
      const called = [...listeners];
      listeners.clear();
      for (const listener of called) listener(event);
    };
    const entry: PathWatch = { watcher, listeners };
    this.byPath.set(path, entry);
    return entry;
  }
}
