import { spawn, type ChildProcess } from 'node:child_process';
import { readdirSync } from 'node:fs';
import { connect } from 'node:net';
import { procStatFields } from './proc-stat';

export interface ServerProcessOptions {
  /** Shown in errors: 'redis-server on 127.0.0.1:6380'. */
  name: string;
  command: string;
  args: string[];
  /** The TCP port on 127.0.0.1 that accepts connections once the server is up. */
  port: number;
  env?: NodeJS.ProcessEnv;
  cwd?: string;
  /** Extra readiness check after the port accepts (e.g. a PING). Default: none. */
  ready?: () => Promise<boolean>;
  /** Default 30000. */
  startTimeoutMs?: number;
  /** Run as this system user and group (PostgreSQL refuses to run as root). Default: ours. */
  uid?: number;
  gid?: number;
  /**
   * The server forks a process per connection (PostgreSQL, whose children each start their own
   * session, so a process group would not hold them): kill, pause and resume signal the server's
   * child processes too, as a crash or a frozen machine would.
   */
  withChildren?: boolean;
  /** What stop() sends first. Default SIGTERM; PostgreSQL's fast shutdown is SIGINT (its SIGTERM waits for every client). */
  stopSignal?: NodeJS.Signals;
}

const running = new Set<ChildProcess>();
const withChildren = new WeakSet<ChildProcess>();
const killRunning = () => {
  for (const child of running) signalServer(child, 'SIGKILL');
};

/** SIGKILL, SIGSTOP and SIGCONT reach a forking server's children too; other signals only the server itself. */
function signalServer(child: ChildProcess, signal: NodeJS.Signals): void {
  const children = withChildren.has(child) && child.pid !== undefined && ['SIGKILL', 'SIGSTOP', 'SIGCONT'].includes(signal) ? childrenOf(child.pid) : [];
  // Stopped first, so it forks no new child meanwhile; resumed last.
  if (signal !== 'SIGCONT') child.kill(signal);
  for (const pid of children) {
    try {
      process.kill(pid, signal);
    } catch {
      // Exited meanwhile.
    }
  }
  if (signal === 'SIGCONT') child.kill(signal);
  if (signal === 'SIGSTOP' && child.pid !== undefined) untilStopped([child.pid, ...children]);
}

const STOP_WAIT_MS = 1_000;
const sleeper = new Int32Array(new SharedArrayBuffer(4));

/**
 * Waits (synchronously, as pause() is) until every thread of `pids` is stopped: SIGSTOP reaches a
 * thread that is not on a CPU when it next runs, and a test that goes on before then can have its
 * requests answered by a server it believes paused (seen under load, with Go's and Java's threads).
 */
function untilStopped(pids: number[]): void {
  const deadline = performance.now() + STOP_WAIT_MS;
  while (pids.some(isRunning)) {
    if (performance.now() > deadline) throw new Error(`SIGSTOP: processes ${pids.join(', ')} not all stopped after ${STOP_WAIT_MS} ms`);
    Atomics.wait(sleeper, 0, 0, 1);
  }
}

/** Some thread of `pid` is not stopped ('T') and the process has not exited. */
function isRunning(pid: number): boolean {
  let threads: string[];
  try {
    threads = readdirSync(`/proc/${pid}/task`);
  } catch {
    return false; // exited
  }
  return threads.some((thread) => {
    try {
      const state = procStatFields(`/proc/${pid}/task/${thread}/stat`)[0];
      return state !== 'T' && state !== 't' && state !== 'Z' && state !== 'X';
    } catch {
      return false;
    }
  });
}

/** The direct children of `pid`, from /proc (Linux). */
function childrenOf(pid: number): number[] {
  const children: number[] = [];
  for (const entry of readdirSync('/proc')) {
    if (!/^\d+$/.test(entry)) continue;
    try {
      if (Number(procStatFields(`/proc/${entry}/stat`)[1]) === pid) children.push(Number(entry));
    } catch {
      // Exited meanwhile.
    }
  }
  return children;
}
process.once('exit', killRunning);
// The test runner stops a file that overruns its time with a signal, which skips 'exit': the
// servers would outlive it and load the machine for the files after it.
for (const signal of ['SIGTERM', 'SIGINT'] as const) {
  process.once(signal, () => {
    killRunning();
    process.exit(1);
  });
}

/**
 * A throwaway server started from its Debian package on a loopback port. Start fails loudly,
 * with the server's own output, when the server cannot come up: suites never skip.
 */
export class ServerProcess {
  private output = '';

  private constructor(
    readonly options: ServerProcessOptions,
    private child: ChildProcess,
  ) {
    this.capture();
  }

  static async start(options: ServerProcessOptions): Promise<ServerProcess> {
    const server = new ServerProcess(options, ServerProcess.spawn(options));
    await server.waitUntilReady();
    return server;
  }

  get pid(): number {
    return this.child.pid!;
  }

  get port(): number {
    return this.options.port;
  }

  /** False once the process has exited (stopped, killed or crashed). */
  get running(): boolean {
    return this.child.exitCode === null && this.child.signalCode === null;
  }

  /** Stops the server (SIGTERM, then SIGKILL after 5 s) and waits for it to exit. */
  async stop(signal: NodeJS.Signals = this.options.stopSignal ?? 'SIGTERM'): Promise<void> {
    if (this.child.exitCode !== null || this.child.signalCode !== null) return;
    const exited = new Promise<void>((resolve) => this.child.once('exit', () => resolve()));
    signalServer(this.child, signal);
    const escalate = setTimeout(() => signalServer(this.child, 'SIGKILL'), 5_000);
    await exited;
    clearTimeout(escalate);
  }

  /** The last 4000 characters the server printed: for a test's failure message. */
  get recentOutput(): string {
    return this.output;
  }

  /** Starts the same server again, on the same port and data (after stop()). */
  async restart(): Promise<void> {
    await this.stop();
    this.child = ServerProcess.spawn(this.options);
    this.capture();
    await this.waitUntilReady();
  }

  pause(): void {
    signalServer(this.child, 'SIGSTOP');
  }

  resume(): void {
    signalServer(this.child, 'SIGCONT');
  }

  private static spawn(options: ServerProcessOptions): ChildProcess {
    const child = spawn(options.command, options.args, {
      cwd: options.cwd,
      env: options.env ?? process.env,
      stdio: ['ignore', 'pipe', 'pipe'],
      uid: options.uid,
      gid: options.gid,
    });
    if (options.withChildren) withChildren.add(child);
    running.add(child);
    child.once('exit', () => running.delete(child));
    return child;
  }

  private capture(): void {
    const keep = (chunk: Buffer) => {
      this.output = (this.output + chunk.toString()).slice(-4_000);
    };
    this.child.stdout?.on('data', keep);
    this.child.stderr?.on('data', keep);
  }

  private async waitUntilReady(): Promise<void> {
    const { name, port } = this.options;
    const deadline = Date.now() + (this.options.startTimeoutMs ?? 30_000);
    let spawnError: Error | undefined;
    this.child.once('error', (error) => (spawnError = error));
    while (Date.now() < deadline) {
      if (spawnError) throw new Error(`${name} could not be started: ${spawnError.message}`);
      if (this.child.exitCode !== null) {
        throw new Error(`${name} exited with code ${this.child.exitCode} before it was ready. Its output:\n${this.output}`);
      }
      if ((await portAccepts(port)) && (!this.options.ready || (await this.options.ready().catch(() => false)))) return;
      await new Promise((resolve) => setTimeout(resolve, 50));
    }
    signalServer(this.child, 'SIGKILL');
    throw new Error(`${name} was not ready after ${this.options.startTimeoutMs ?? 30_000} ms. Its output:\n${this.output}`);
  }
}

/** Whether a TCP connection to `port` on 127.0.0.1 is accepted now (closed again at once). */
export function portAccepts(port: number): Promise<boolean> {
  return new Promise((resolve) => {
    const socket = connect({ host: '127.0.0.1', port });
    socket.once('connect', () => {
      socket.destroy();
      resolve(true);
    });
    socket.once('error', () => resolve(false));
  });
}
