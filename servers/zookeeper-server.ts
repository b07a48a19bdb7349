import { writeFile } from 'node:fs/promises';
import { connect } from 'node:net';
import path from 'node:path';
import { freePort } from './free-port';
import { ServerProcess } from './server-process';
import { inTempDir } from './temp-dir-server';

export interface ZooKeeperServer {
  readonly server: ServerProcess;
  readonly port: number;
  /** `127.0.0.1:<port>`, the backend's connectionString. */
  readonly connectionString: string;
  /** The tick: sessions are expired in steps of it. */
  readonly tickTimeMs: number;
  stop(): Promise<void>;
}

export interface ZooKeeperServerOptions {
  /** Default 100: sessions as short as 2 ticks, so fault tests can use 1 s sessions. */
  tickTimeMs?: number;
  /** Extra zoo.cfg lines. */
  config?: string[];
}

/** Debian's zookeeper package puts the server jar here; its manifest names the jars it needs. */
export const ZOOKEEPER_JAR = '/usr/share/java/zookeeper.jar';

/**
 * A throwaway standalone ZooKeeper 3.8 (Debian's package) run with the machine's `java` on a free
 * loopback port, its data in a temp dir (kept across restart(), so sessions survive a restart
 * like they do on a real server). Ready when it answers the `ruok` four-letter word.
 */
export async function startZooKeeperServer(options: ZooKeeperServerOptions = {}): Promise<ZooKeeperServer> {
  const tickTimeMs = options.tickTimeMs ?? 100;
  const port = await freePort();
  return inTempDir('lock-zookeeper-', async (dir) => {
    const config = [
      `tickTime=${tickTimeMs}`,
      `clientPort=${port}`,
      'clientPortAddress=127.0.0.1',
      `dataDir=${path.join(dir, 'data')}`,
      'admin.enableServer=false',
      `minSessionTimeout=${tickTimeMs * 2}`,
      `maxSessionTimeout=${Math.max(tickTimeMs * 20, 60_000)}`,
      '4lw.commands.whitelist=ruok,srvr',
      ...(options.config ?? []),
    ];
    const configFile = path.join(dir, 'zoo.cfg');
    await writeFile(configFile, `${config.join('\n')}\n`);
    const server = await ServerProcess.start({
      name: `zookeeper on 127.0.0.1:${port}`,
      command: 'java',
      // A small heap: several servers run at once on a 2-core machine. Log4j/SLF4J print nothing.
      args: ['-Xmx256m', '-XX:+UseSerialGC', '-cp', ZOOKEEPER_JAR, 'org.apache.zookeeper.server.ZooKeeperServerMain', configFile],
      port,
      ready: () => fourLetterWord(port, 'ruok').then((answer) => answer === 'imok'),
      startTimeoutMs: 60_000,
    });
    return {
      server,
      port,
      connectionString: `127.0.0.1:${port}`,
      tickTimeMs,
      stop: () => server.stop(),
    };
  });
}

/**
 * How many transactions the server has applied in its current epoch: the counter part (low 32
 * bits) of its last zxid, from the `srvr` four-letter word. Every write gets one (a multi one in
 * all, a failed write one too); reads, watches and pings none.
 */
export async function transactionCount(port: number): Promise<number> {
  const answer = await fourLetterWord(port, 'srvr');
  const zxid = /Zxid: 0x([0-9a-f]+)/i.exec(answer)?.[1];
  if (!zxid) throw new Error(`no Zxid in the srvr answer: ${answer}`);
  return Number(BigInt(`0x${zxid}`) & 0xffffffffn);
}

/** Requests (packets) the server has received since it started, pings included: from `srvr`. */
export async function packetsReceived(port: number): Promise<number> {
  const answer = await fourLetterWord(port, 'srvr');
  const received = /Received: (\d+)/.exec(answer)?.[1];
  if (!received) throw new Error(`no Received count in the srvr answer: ${answer}`);
  return Number(received);
}

/** A four-letter word's answer (the word must be in the server's `4lw.commands.whitelist`). */
export function fourLetterWord(port: number, word: string): Promise<string> {
  return new Promise((resolve, reject) => {
    const socket = connect({ host: '127.0.0.1', port });
    let answer = '';
    socket.setTimeout(2_000, () => socket.destroy(new Error('no answer')));
    socket.on('connect', () => socket.write(word));
    socket.on('data', (chunk) => (answer += chunk.toString()));
    socket.on('end', () => resolve(answer));
    socket.on('error', reject);
  });
}
