import assert from 'node:assert/strict';
import type { EventEmitter } from 'node:events';
import type { Client } from 'node-zookeeper-client';
import type { LockBackend } from '../../../lib';

/**
 * The parts of node-zookeeper-client's insides that the tests and the benchmark look at: its
 * ConnectionManager (every request goes through `queue`) and WatcherManager (one EventEmitter
 * of watcher functions per path; `emit` is called once per watch event from the server).
 */
interface ClientInternals {
  connectionManager: {
    queue(request: { header?: { type: number } | null; payload?: { path?: string } | null }, callback?: unknown): void;
    watcherManager: {
      dataWatchers: Record<string, EventEmitter>;
      emit(event: { type: number; path: string }): void;
    };
  };
}

/** The node-zookeeper-client of the ZooKeeper backend's current session (a private field: for tests and the benchmark only). */
export function clientOf(backend: LockBackend): Client {
  const session = (backend as unknown as { sessions?: { existing: { client: Client } } }).sessions?.existing;
  assert.ok(session, 'not a ZooKeeper backend');
  return session.client;
}

/** How many watcher functions the client keeps for `path` (they pile up if every wait adds its own). */
export function watcherFunctionsOn(client: Client, path: string): number {
  return internals(client).connectionManager.watcherManager.dataWatchers[path]?.listenerCount('notification') ?? 0;
}

/** The paths the client keeps watcher functions for (its watches that have not fired yet). */
export function watchedPaths(client: Client): string[] {
  const watchers = internals(client).connectionManager.watcherManager.dataWatchers;
  return Object.keys(watchers).filter((path) => watchers[path].listenerCount('notification') > 0);
}

const OPERATIONS: Record<number, string> = {
  1: 'create',
  2: 'delete',
  3: 'exists',
  4: 'getData',
  5: 'setData',
  11: 'ping',
  12: 'getChildren',
  14: 'multi',
  100: 'auth',
  101: 'setWatches',
  [-11]: 'closeSession',
};

/** Whether a request kind counted by ClientTraffic is a keep-alive (heartbeat, ping), not lock work. */
export function isKeepAlive(kind: string): boolean {
  return kind === 'heartbeat' || kind === 'ping';
}

/**
 * Counts what a client does from now on: the requests it sends, by operation (the backend's
 * heartbeat, an `exists /`, and the client's own pings apart), and the watch events it receives.
 */
export class ClientTraffic {
  private readonly requests = new Map<string, number>();
  private eventCount = 0;

  constructor(client: Client) {
    const manager = internals(client).connectionManager;
    const queue = manager.queue.bind(manager);
    manager.queue = (request, callback) => {
      const operation = request.header ? (OPERATIONS[request.header.type] ?? `op ${request.header.type}`) : 'connect';
      const kind = operation === 'exists' && request.payload?.path === '/' ? 'heartbeat' : operation;
      this.requests.set(kind, (this.requests.get(kind) ?? 0) + 1);
      queue(request, callback);
    };
    const watchers = manager.watcherManager;
    const emit = watchers.emit.bind(watchers);
    watchers.emit = (event) => {
      this.eventCount++;
      emit(event);
    };
  }

  /** Requests of one operation sent since the last reset. */
  sent(operation: string): number {
    return this.requests.get(operation) ?? 0;
  }

  /** Requests sent since the last reset, by operation. */
  counts(): Map<string, number> {
    return new Map(this.requests);
  }

  /** Requests sent since the last reset, but for keep-alives (heartbeats, pings). */
  get requestsSent(): number {
    let total = 0;
    for (const [kind, count] of this.requests) if (!isKeepAlive(kind)) total += count;
    return total;
  }

  /** Watch events received since the last reset. */
  get events(): number {
    return this.eventCount;
  }

  /** `delete 1, getData 2`, for messages. */
  describe(): string {
    return [...this.requests].map(([kind, count]) => `${kind} ${count}`).join(', ') || 'none';
  }

  reset(): void {
    this.requests.clear();
    this.eventCount = 0;
  }
}

function internals(client: Client): ClientInternals {
  return client as unknown as ClientInternals;
}
