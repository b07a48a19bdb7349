import { chown, writeFile } from 'node:fs/promises';
import path from 'node:path';
import { freePort } from './free-port';
import { runSql, serverUser } from './postgres-server';
import { ServerProcess } from './server-process';
import { inTempDir } from './temp-dir-server';

export interface PgBouncerServer {
  readonly server: ServerProcess;
  /** `postgres://postgres@127.0.0.1:<port>/postgres`, through the bouncer. */
  readonly url: string;
  stop(): Promise<void>;
}

/**
 * A throwaway PgBouncer (Debian's `pgbouncer` package) in front of a PostgreSQL on 127.0.0.1,
 * on a free port, in transaction mode: a server connection is a client's only for one
 * transaction. `serverConnections` small, so clients really share them. Runs as the `postgres`
 * user when we are root (PgBouncer refuses root).
 */
export async function startPgBouncer(postgresPort: number, serverConnections = 2): Promise<PgBouncerServer> {
  const port = await freePort();
  return inTempDir('lock-pgbouncer-', async (dir) => {
    const user = await serverUser();
    if (user) await chown(dir, user.uid, user.gid);
    const config = path.join(dir, 'pgbouncer.ini');
    await writeFile(path.join(dir, 'users.txt'), '"postgres" ""\n');
    await writeFile(
      config,
      [
        '[databases]',
        `postgres = host=127.0.0.1 port=${postgresPort} dbname=postgres`,
        '[pgbouncer]',
        'listen_addr = 127.0.0.1',
        `listen_port = ${port}`,
        'unix_socket_dir =',
        'auth_type = trust',
        `auth_file = ${path.join(dir, 'users.txt')}`,
        'pool_mode = transaction',
        `default_pool_size = ${serverConnections}`,
        'max_client_conn = 500',
        `logfile = ${path.join(dir, 'pgbouncer.log')}`,
        `pidfile = ${path.join(dir, 'pgbouncer.pid')}`,
        '',
      ].join('\n'),
    );
    if (user) for (const file of ['pgbouncer.ini', 'users.txt']) await chown(path.join(dir, file), user.uid, user.gid);
    const url = `postgres://postgres@127.0.0.1:${port}/postgres`;
    const server = await ServerProcess.start({
      name: `pgbouncer on 127.0.0.1:${port}`,
      command: '/usr/sbin/pgbouncer',
      args: [config],
      port,
      uid: user?.uid,
      gid: user?.gid,
      ready: () => runSql(url, 'SELECT 1').then(() => true),
    });
    return { server, url, stop: () => server.stop() };
  });
}
