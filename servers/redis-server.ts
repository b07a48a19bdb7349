import { freePort } from './free-port';
import { ServerProcess } from './server-process';
import { inTempDir } from './temp-dir-server';

export interface RedisServer {
  readonly server: ServerProcess;
  readonly url: string;
  readonly port: number;
  stop(): Promise<void>;
}

/**
 * A throwaway redis-server (Debian's package) on a free loopback port, its files in a temp dir.
 * No persistence by default (`--save '' --appendonly no`): a restart loses every key, which is
 * what the restart test wants. Pass extra arguments (e.g. `--appendonly yes`) to change that.
 */
export async function startRedisServer(extraArgs: string[] = []): Promise<RedisServer> {
  const port = await freePort();
  return inTempDir('lock-redis-', async (dir) => {
    const args = ['--port', String(port), '--bind', '127.0.0.1', '--save', '', '--appendonly', 'no', '--dir', dir, '--daemonize', 'no', ...extraArgs];
    const server = await ServerProcess.start({ name: `redis-server on 127.0.0.1:${port}`, command: 'redis-server', args, port });
    return { server, port, url: `redis://127.0.0.1:${port}`, stop: () => server.stop() };
  });
}

/**
 * Total commands the server has executed, from INFO commandstats (commands run inside scripts
 * count too), leaving out the INFO calls that read it. `info` is any client's `info` method.
 */
export async function commandsExecuted(info: (section: string) => Promise<string>): Promise<{ total: number; byCommand: Record<string, number> }> {
  const byCommand: Record<string, number> = {};
  let total = 0;
  for (const match of (await info('commandstats')).matchAll(/^cmdstat_([^:]+):calls=(\d+)/gm)) {
    if (match[1] === 'info') continue;
    byCommand[match[1]] = Number(match[2]);
    total += Number(match[2]);
  }
  return { total, byCommand };
}
