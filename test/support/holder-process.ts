import { fork, type ChildProcess } from 'node:child_process';
import path from 'node:path';
import type { Connection } from '../../sample-app/backends/sample-backend';

export type HolderCommand =
  | { type: 'acquire'; name: string; waitTimeoutMs?: number; renew?: boolean }
  | { type: 'write'; sku: string; record: { stock: number; lucky: number } }
  | { type: 'release' }
  | { type: 'exit' };

export type HolderEvent =
  | { type: 'ready' }
  | { type: 'acquired'; fencingToken: string }
  | { type: 'lost'; message: string }
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
    const child = fork(path.join(__dirname, 'holder.worker.js'), [], {
      env: { ...process.env, HOLDER_BACKEND: backend, HOLDER_CONNECTION: JSON.stringify(connection), HOLDER_TTL_MS: String(ttlMs) },
      stdio: ['ignore', 'inherit', 'inherit', 'ipc'],
    });
    const holder = new HolderProcess(child);
    await holder.next('ready', 30_000);
    return holder;
  }

  get pid(): number {
    return this.child.pid!;
  }

  /** Acquires `name` in the child; resolves with its fencing token. */
  async acquire(name: string, options: { waitTimeoutMs?: number; renew?: boolean } = {}): Promise<bigint> {
    this.child.send({ type: 'acquire', name, ...options } satisfies HolderCommand);
    const event = await this.next('acquired', 30_000);
    return BigInt(event.fencingToken);
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
  lost(timeoutMs: number): Promise<{ type: 'lost'; message: string }> {
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

  private async next<T extends HolderEvent['type']>(type: T, timeoutMs: number, from = this.events.length): Promise<Extract<HolderEvent, { type: T }>> {
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
