import { fork, type ChildProcess } from 'node:child_process';
import path from 'node:path';
import type { DistributedLockModuleOptions } from '../../lib';
import type { Connection } from '../../sample-app/backends/sample-backend';

export type HolderCommand =
  /** `mode`: a lock's; `limit`: a semaphore's permit instead of a lock. */
  | { type: 'acquire'; name: string; waitTimeoutMs?: number; renew?: boolean; mode?: 'read' | 'write'; limit?: number }
  | { type: 'withLock'; name: string; holdMs: number; waitTimeoutMs?: number }
  | { type: 'write'; sku: string; record: { stock: number; lucky: number } }
  | { type: 'release' }
  | { type: 'exit' };

export type HolderEvent =
  | { type: 'ready' }
  /** `grantedAt`: process.hrtime.bigint() when the grant reached the child, as a string (one clock for every process). */
  | { type: 'acquired'; fencingToken: string; grantedAt: string }
  /** withLock's handler began; `held`: its lock was held and not known lost at that moment. */
  | { type: 'entered'; fencingToken: string; at: string; held: boolean }
  /** The critical section ran as holder from `start` to `end` (the handler's end, or its lock's loss if earlier: then `cutShort`). */
  | { type: 'section'; fencingToken: string; start: string; end: string; cutShort: boolean }
  | { type: 'done'; error?: { name: string; message: string; reason?: string } }
  /** `at`: process.hrtime.bigint() when the signal fired, as `grantedAt`. */
  | { type: 'lost'; message: string; at: string }
  | { type: 'written' }
  | { type: 'released' }
  | { type: 'error'; name: string; message: string };

/**
 * Another process holding locks on a real server (its own Nest app): the fault tests kill it,
 * pause it and let it write with its fencing token. Every event it sends is kept, so a test
 * can wait for one that already arrived.
 */
export class HolderProcess {
  readonly events: HolderEvent[] = [];
  private readonly listeners = new Set<() => void>();

  private constructor(readonly child: ChildProcess) {
    child.on('message', (event: HolderEvent) => {
      this.events.push(event);
      for (const listener of this.listeners) listener();
    });
  }

  static async start(backend: string, connection: Connection, ttlMs: number): Promise<HolderProcess> {
    return HolderProcess.fork({ HOLDER_BACKEND: backend, HOLDER_CONNECTION: JSON.stringify(connection), HOLDER_TTL_MS: String(ttlMs) });
  }

  /**
   * A child whose module is `DistributedLockModule.forRoot(options)` (JSON-safe options: no
   * custom backend), connected and ready to queue at once. It has no stock store.
   */
  static async withModule(options: DistributedLockModuleOptions): Promise<HolderProcess> {
    return HolderProcess.fork({ HOLDER_MODULE_OPTIONS: JSON.stringify(options) });
  }

  private static async fork(env: Record<string, string>): Promise<HolderProcess> {
    const child = fork(path.join(__dirname, 'holder.worker.js'), [], {
      env: { ...process.env, ...env },
      stdio: ['ignore', 'inherit', 'inherit', 'ipc'],
    });
    const holder = new HolderProcess(child);
    try {
      await holder.next('ready', 30_000);
    } catch (error) {
      await holder.stop();
      throw error;
    }
    return holder;
  }

  get pid(): number {
    return this.child.pid!;
  }

  /** Acquires `name` in the child; resolves with its fencing token. */
  async acquire(name: string, options: { waitTimeoutMs?: number; renew?: boolean; mode?: 'read' | 'write'; limit?: number } = {}): Promise<bigint> {
    this.child.send({ type: 'acquire', name, ...options } satisfies HolderCommand);
    const event = await this.next('acquired', 30_000);
    return BigInt(event.fencingToken);
  }

  /** As acquire(), with the whole event: its token and when the grant reached the child. */
  async acquireTimed(
    name: string,
    options: { waitTimeoutMs?: number; renew?: boolean; mode?: 'read' | 'write'; limit?: number } = {},
  ): Promise<{ fencingToken: bigint; grantedAt: bigint }> {
    const from = this.events.length;
    this.child.send({ type: 'acquire', name, ...options } satisfies HolderCommand);
    const event = await this.next('acquired', 30_000, from);
    return { fencingToken: BigInt(event.fencingToken), grantedAt: BigInt(event.grantedAt) };
  }

  /**
   * Runs withLock(name) in the child, its critical section lasting `holdMs` unless the lock is lost
   * first. `entered` and `done` resolve with the child's reports; both wait up to `timeoutMs`.
   */
  withLock(name: string, options: { holdMs: number; waitTimeoutMs?: number }, timeoutMs = 30_000) {
    const from = this.events.length;
    this.child.send({ type: 'withLock', name, ...options } satisfies HolderCommand);
    const entered = this.next('entered', timeoutMs, from);
    const done = this.next('done', timeoutMs, from);
    // Either may go unawaited when the test fails first: never an unhandled rejection.
    entered.catch(() => undefined);
    done.catch(() => undefined);
    return { entered, done, sections: () => this.eventsOf('section', from) };
  }

  /** The events of `type` received since index `from`. */
  eventsOf<T extends HolderEvent['type']>(type: T, from = 0): Extract<HolderEvent, { type: T }>[] {
    return this.events.slice(from).filter((event): event is Extract<HolderEvent, { type: T }> => event.type === type);
  }

  /** Releases the lock the child took with acquire(). */
  async release(): Promise<void> {
    const from = this.events.length;
    this.child.send({ type: 'release' } satisfies HolderCommand);
    await this.next('released', 30_000, from);
  }

  /** A fenced stock write from the child; resolves with the child's error name, if any. */
  async write(sku: string, record: { stock: number; lucky: number }): Promise<string | undefined> {
    const seen = this.events.length;
    this.child.send({ type: 'write', sku, record } satisfies HolderCommand);
    await this.waitFor((event) => event.type === 'written' || event.type === 'error', 30_000, seen);
    const result = this.events.slice(seen).find((event) => event.type === 'written' || event.type === 'error')!;
    return result.type === 'error' ? result.name : undefined;
  }

  /** Resolves when the child reports the lock lost. */
  lost(timeoutMs: number): Promise<Extract<HolderEvent, { type: 'lost' }>> {
    return this.next('lost', timeoutMs, 0);
  }

  kill(signal: NodeJS.Signals): void {
    this.child.kill(signal);
  }

  async stop(): Promise<void> {
    if (this.child.exitCode !== null || this.child.signalCode !== null) return;
    const exited = new Promise((resolve) => this.child.once('exit', resolve));
    this.child.kill('SIGKILL');
    await exited;
  }

  async next<T extends HolderEvent['type']>(type: T, timeoutMs: number, from = this.events.length): Promise<Extract<HolderEvent, { type: T }>> {
    await this.waitFor((event) => event.type === type || event.type === 'error', timeoutMs, from);
    const event = this.events.slice(from).find((e) => e.type === type || e.type === 'error')!;
    if (event.type === 'error') throw new Error(`holder process failed: ${event.name}: ${event.message}`);
    return event as Extract<HolderEvent, { type: T }>;
  }

  private waitFor(match: (event: HolderEvent) => boolean, timeoutMs: number, from: number): Promise<void> {
    return new Promise((resolve, reject) => {
      const check = () => {
        if (!this.events.slice(from).some(match)) return;
        cleanup();
        resolve();
      };
      const onExit = () => {
        cleanup();
        reject(new Error(`holder process ${this.pid} exited before the awaited event`));
      };
      const timer = setTimeout(() => {
        cleanup();
        reject(new Error(`holder process ${this.pid}: no awaited event within ${timeoutMs} ms`));
      }, timeoutMs);
      const cleanup = () => {
        clearTimeout(timer);
        this.listeners.delete(check);
        this.child.off('exit', onExit);
      };
      this.listeners.add(check);
      this.child.once('exit', onExit);
      check();
    });
  }
}
