import { freePort } from './free-port';
import { ServerProcess } from './server-process';
import type { TestCertificates } from './test-certificates';
import { inTempDir } from './temp-dir-server';

export interface RedisServer {
  readonly server: ServerProcess;
  readonly url: string;
  readonly port: number;
  stop(): Promise<void>;
}

/**
 * The persistence a lock server needs (README, "Before production"): a restart keeps every lock,
 * fence and the life marker. For fault tests about reachability, where a restart must not also be
 * a loss of data (that is its own test: a restart without data is quarantined for a ttl).
 */
export const DURABLE_REDIS_ARGS = ['--appendonly', 'yes', '--appendfsync', 'always'];

/**
 * A throwaway redis-server (Debian's package) on a free loopback port, its files in a temp dir.
 * No persistence by default (`--save '' --appendonly no`): a restart loses every key, which is
 * what the restart test wants. Pass extra arguments (e.g. `--appendonly yes`) to change that.
 */
export async function startRedisServer(extraArgs: string[] = []): Promise<RedisServer> {
  return startOnFreePort('redis', (port) => ['--port', String(port)], extraArgs);
}

/**
 * The same server listening on TLS only (`--port 0`: no plain port), with `certificates`' server
 * certificate, trusting only their CA, and requiring a client certificate (`--tls-auth-clients
 * yes`). `url` is `rediss://127.0.0.1:<port>`. Debian's redis-server is built with TLS.
 */
export async function startRedisTlsServer(certificates: TestCertificates, extraArgs: string[] = []): Promise<RedisServer> {
  const tlsArgs = (port: number) => [
    '--port', '0',
    '--tls-port', String(port),
    '--tls-cert-file', certificates.server.certFile,
    '--tls-key-file', certificates.server.keyFile,
    '--tls-ca-cert-file', certificates.caFile,
    '--tls-auth-clients', 'yes',
  ];
  return startOnFreePort('rediss', tlsArgs, extraArgs);
}

async function startOnFreePort(scheme: 'redis' | 'rediss', portArgs: (port: number) => string[], extraArgs: string[]): Promise<RedisServer> {
  const port = await freePort();
  return inTempDir('lock-redis-', async (dir) => {
    const args = [...portArgs(port), '--bind', '127.0.0.1', '--save', '', '--appendonly', 'no', '--dir', dir, '--daemonize', 'no', ...extraArgs];
    const name = `redis-server on ${scheme === 'rediss' ? 'TLS ' : ''}127.0.0.1:${port}`;
    const server = await ServerProcess.start({ name, command: 'redis-server', args, port });
    return { server, port, url: `${scheme}://127.0.0.1:${port}`, stop: () => server.stop() };
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
