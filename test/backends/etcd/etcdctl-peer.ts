import { spawn, type ChildProcess } from 'node:child_process';
import { createInterface } from 'node:readline';
import { sleep } from '../../support/timing';

/** `etcdctl lock` (etcd-client 3.4: Go's concurrency.Mutex over the Lock service's key layout), the other side of the etcd interop tests. */

/** An `etcdctl lock` process: `held` resolves with the key it prints once it owns the lock. */
export interface EtcdctlLock {
  readonly child: ChildProcess;
  readonly held: Promise<{ key: string; at: number }>;
  readonly exited: Promise<number | null>;
}

export function etcdctlLock(endpoints: string[], name: string, command: string[] = []): EtcdctlLock {
  const child = spawn('etcdctl', ['--endpoints', endpoints.join(','), 'lock', name, ...(command.length > 0 ? ['--', ...command] : [])], { env: { ...process.env, ETCDCTL_API: '3' }, stdio: ['ignore', 'pipe', 'pipe'] });
  let stderr = '';
  child.stderr!.on('data', (chunk) => (stderr += chunk));
  const exited = new Promise<number | null>((resolve) => child.on('exit', resolve));
  const held = new Promise<{ key: string; at: number }>((resolve, reject) => {
    const lines = createInterface({ input: child.stdout! });
    lines.once('line', (key) => resolve({ key, at: performance.now() }));
    void exited.then((code) => reject(new Error(`etcdctl lock ${name} exited (${code}) before it held the lock: ${stderr}`)));
  });
  held.catch(() => undefined);
  return { child, held, exited };
}

/** Whether `promise` settled within `ms`. */
export async function settlesWithin(promise: Promise<unknown>, ms: number): Promise<boolean> {
  let settled = false;
  void promise.then(
    () => (settled = true),
    () => (settled = true),
  );
  await sleep(ms);
  return settled;
}
