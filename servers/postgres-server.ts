import { execFile } from 'node:child_process';
import { chown } from 'node:fs/promises';
import { userInfo } from 'node:os';
import path from 'node:path';
import { promisify } from 'node:util';
import { Client } from 'pg';
import { freePort } from './free-port';
import { ServerProcess } from './server-process';
import { inTempDir } from './temp-dir-server';

/** Debian's postgresql-15 package puts its server binaries here (not on PATH). */
export const POSTGRES_BIN = '/usr/lib/postgresql/15/bin';

export interface PostgresServer {
  readonly server: ServerProcess;
  readonly port: number;
  /** `postgres://postgres@127.0.0.1:<port>/postgres` (trust authentication: no password). */
  readonly url: string;
  stop(): Promise<void>;
}

/**
 * A throwaway PostgreSQL 15 (Debian's package) on a free loopback port: `initdb` into a temp
 * dir, the server's unix socket in that dir too, no fsync (a test server). PostgreSQL refuses to
 * run as root, so when we are root both run as the `postgres` system user, who then owns the
 * dir. Kill, pause and resume reach its child processes (one per connection) too.
 */
export async function startPostgresServer(extraArgs: string[] = []): Promise<PostgresServer> {
  const port = await freePort();
  return inTempDir('lock-postgres-', async (dir) => {
    const user = await serverUser();
    if (user) await chown(dir, user.uid, user.gid);
    const data = path.join(dir, 'data');
    await promisify(execFile)(path.join(POSTGRES_BIN, 'initdb'), ['-D', data, '-U', 'postgres', '--auth=trust', '-E', 'UTF8', '--no-sync', '--no-instructions'], {
      uid: user?.uid,
      gid: user?.gid,
    }).catch((error: Error & { stderr?: string }) => {
      throw new Error(`initdb into ${data} failed: ${error.message}\n${error.stderr ?? ''}`);
    });
    const url = `postgres://postgres@127.0.0.1:${port}/postgres`;
    const args = [
      '-D', data,
      '-p', String(port),
      '-c', 'listen_addresses=127.0.0.1',
      '-c', `unix_socket_directories=${dir}`,
      '-c', 'fsync=off',
      '-c', 'synchronous_commit=off',
      '-c', 'full_page_writes=off',
      '-c', 'max_connections=300',
      '-c', 'shared_buffers=32MB',
      ...extraArgs,
    ];
    const server = await ServerProcess.start({
      name: `postgres on 127.0.0.1:${port}`,
      command: path.join(POSTGRES_BIN, 'postgres'),
      args,
      port,
      uid: user?.uid,
      gid: user?.gid,
      cwd: dir,
      withChildren: true,
      stopSignal: 'SIGINT',
      ready: () => answers(url),
    });
    return { server, port, url, stop: () => server.stop() };
  });
}

/** Runs one statement on a fresh connection: for tests and tools that need no pool. */
export async function runSql<Row = Record<string, unknown>>(url: string, text: string, values: unknown[] = []): Promise<Row[]> {
  const client = new Client({ connectionString: url, connectionTimeoutMillis: 5_000 });
  await client.connect();
  try {
    return (await client.query(text, values)).rows as Row[];
  } finally {
    await client.end();
  }
}

async function answers(url: string): Promise<boolean> {
  await runSql(url, 'SELECT 1');
  return true;
}

/** The `postgres` system user when we are root (PostgreSQL and PgBouncer refuse root), else nobody: we run it ourselves. */
export async function serverUser(): Promise<{ uid: number; gid: number } | undefined> {
  if (userInfo().uid !== 0) return undefined;
  const { stdout } = await promisify(execFile)('id', ['-u', 'postgres']).catch(() => {
    throw new Error('PostgreSQL refuses to run as root and there is no "postgres" user: apt-get install postgresql creates it.');
  });
  const { stdout: group } = await promisify(execFile)('id', ['-g', 'postgres']);
  return { uid: Number(stdout.trim()), gid: Number(group.trim()) };
}
