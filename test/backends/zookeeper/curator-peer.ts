import { execFile, spawn, type ChildProcessWithoutNullStreams } from 'node:child_process';
import { existsSync } from 'node:fs';
import { mkdtemp } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { createInterface } from 'node:readline';
import { promisify } from 'node:util';

/**
 * Debian's jars that a Curator client needs at run time: the recipes, the framework and client
 * under them, ZooKeeper's client and its wire format (jute), Guava, and SLF4J (nop: no log noise).
 */
const JARS = ['curator-recipes', 'curator-framework', 'curator-client', 'zookeeper', 'zookeeper-jute', 'guava', 'slf4j-api', 'slf4j-nop'].map(
  (name) => `/usr/share/java/${name}.jar`,
);
/** Run from dist/test/backends/zookeeper: the source stays in the checkout (tsc does not copy it). */
const SOURCE = path.resolve(__dirname, '..', '..', '..', '..', 'test', 'backends', 'zookeeper', 'curator', 'CuratorLock.java');

/** The Curator lock a peer takes on its path: InterProcessMutex, or InterProcessReadWriteLock's read or write lock. */
export type CuratorKind = 'mutex' | 'read' | 'write';

let compiled: Promise<string> | undefined;

/** Compiles CuratorLock.java once per test process; fails loudly, naming the package, when a jar or javac is missing. */
export function curatorClasspath(): Promise<string> {
  compiled ??= (async () => {
    const missing = JARS.filter((jar) => !existsSync(jar));
    if (missing.length > 0) throw new Error(`The Curator tests need ${missing.join(', ')}: apt-get install libcurator-recipes-java zookeeper`);
    const out = await mkdtemp(path.join(tmpdir(), 'curator-lock-'));
    const classpath = JARS.join(path.delimiter);
    await promisify(execFile)('javac', ['-d', out, '-cp', classpath, SOURCE]).catch((error: Error) => {
      throw new Error(`javac could not compile ${SOURCE} (apt-get install default-jdk-headless): ${error.message}`);
    });
    return `${out}${path.delimiter}${classpath}`;
  })();
  return compiled;
}

/** A JVM running CuratorLock: a real Curator client, as a Java service would hold the lock. */
export class CuratorPeer {
  private readonly lines: string[] = [];
  private readonly waiters: (() => void)[] = [];
  private exited = false;
  private stderr = '';

  private constructor(private readonly child: ChildProcessWithoutNullStreams) {
    createInterface({ input: child.stdout }).on('line', (line) => {
      this.lines.push(line);
      for (const wake of this.waiters.splice(0)) wake();
    });
    child.stderr.on('data', (chunk: Buffer) => (this.stderr += chunk.toString()));
    child.on('exit', () => {
      this.exited = true;
      for (const wake of this.waiters.splice(0)) wake();
    });
  }

  /** Starts the peer on `path` and waits for its session; with `loop`, it holds `rounds` times for `holdMs` each by itself. */
  static async start(connectionString: string, kind: CuratorKind, lockPath: string, loop?: { holdMs: number; rounds: number }): Promise<CuratorPeer> {
    const classpath = await curatorClasspath();
    const args = ['-cp', classpath, 'CuratorLock', connectionString, kind, lockPath];
    if (loop) args.push(String(loop.holdMs), String(loop.rounds));
    const peer = new CuratorPeer(spawn('java', args));
    await peer.next('READY', 30_000);
    return peer;
  }

  /** Sends "acquire" or "release" (see CuratorLock.java). */
  send(command: 'acquire' | 'release'): void {
    this.child.stdin.write(`${command}\n`);
  }

  /** The next unread line starting with `prefix` (earlier lines are consumed); rejects after `timeoutMs`. */
  async next(prefix: string, timeoutMs: number): Promise<string> {
    const deadline = performance.now() + timeoutMs;
    for (;;) {
      const at = this.lines.findIndex((line) => line.startsWith(prefix));
      if (at !== -1) return this.lines.splice(0, at + 1).pop()!;
      const left = deadline - performance.now();
      if (this.exited || left <= 0) {
        throw new Error(`Curator peer: no "${prefix}" line within ${timeoutMs} ms${this.exited ? ' (it exited)' : ''}; stderr: ${this.stderr.slice(-2000)}`);
      }
      await new Promise<void>((resolve) => {
        const timer = setTimeout(resolve, left);
        this.waiters.push(() => {
          clearTimeout(timer);
          resolve();
        });
      });
    }
  }

  /** Whether a line starting with `prefix` came and is unread. */
  has(prefix: string): boolean {
    return this.lines.some((line) => line.startsWith(prefix));
  }

  /** The epoch milliseconds a HOLDING or RELEASED line carries. */
  static timeOf(line: string): number {
    return Number(line.split(' ')[1]);
  }

  /** Ends the input (the peer closes its client and exits) and waits for the exit; kills it if it hangs. */
  async stop(): Promise<void> {
    if (this.exited) return;
    const exited = new Promise<void>((resolve) => this.child.once('exit', () => resolve()));
    this.child.stdin.end();
    const timer = setTimeout(() => this.child.kill('SIGKILL'), 15_000);
    await exited;
    clearTimeout(timer);
  }

  /** Kills the JVM at once, as a crash would: its session (and node) lives until the session timeout. */
  kill(): void {
    this.child.kill('SIGKILL');
  }
}
