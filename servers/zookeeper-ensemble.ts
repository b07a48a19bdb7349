import { mkdir, mkdtemp, rm, writeFile } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { distinctPorts } from './free-port';
import { ServerProcess } from './server-process';
import { fourLetterWord, ZOOKEEPER_JAR } from './zookeeper-server';

export interface ZooKeeperEnsembleOptions {
  /** Default 100, as the standalone test server: sessions as short as 2 ticks. */
  tickTimeMs?: number;
}

/** A member's role from `srvr`: 'leader', 'follower', or undefined while it serves no clients (electing, syncing, dead). */
export type ZooKeeperRole = 'leader' | 'follower' | undefined;

interface Member {
  readonly id: number;
  readonly clientPort: number;
  readonly configFile: string;
  server?: ServerProcess;
}

/**
 * A throwaway ZooKeeper 3.8 ensemble (Debian's package, `QuorumPeerMain`) of `size` members on
 * free loopback ports, each with its own zoo.cfg and data dir under one temp dir, removed by
 * stop(). Start fails loudly, with the member's own output, when one cannot come up.
 *
 * Followers may fall `syncLimit` ticks (1 s) behind before the leader drops them, and a leader
 * that loses a quorum steps down after as long; elections follow ZooKeeper's defaults. The log is
 * not fsynced (`forceSync=no`), as in the standalone fault suite: an fsync stall on the shared
 * disk would end 2 s sessions mid-test, and the log's durability is not what these tests measure.
 */
export class ZooKeeperEnsemble {
  private constructor(
    private readonly root: string,
    private readonly members: Member[],
    readonly tickTimeMs: number,
  ) {}

  static async start(size = 3, options: ZooKeeperEnsembleOptions = {}): Promise<ZooKeeperEnsemble> {
    const tickTimeMs = options.tickTimeMs ?? 100;
    const root = await mkdtemp(path.join(os.tmpdir(), 'lock-zookeeper-ensemble-'));
    const ports = await distinctPorts(size * 3);
    const members: Member[] = Array.from({ length: size }, (_, i) => ({
      id: i + 1,
      clientPort: ports[i],
      configFile: path.join(root, `zoo${i + 1}.cfg`),
    }));
    const servers = members.map((member, i) => `server.${member.id}=127.0.0.1:${ports[size + i]}:${ports[2 * size + i]}`);
    for (const member of members) {
      const dataDir = path.join(root, `data${member.id}`);
      await mkdir(dataDir);
      await writeFile(path.join(dataDir, 'myid'), `${member.id}\n`);
      const config = [
        `tickTime=${tickTimeMs}`,
        'initLimit=50',
        'syncLimit=10',
        `dataDir=${dataDir}`,
        `clientPort=${member.clientPort}`,
        'clientPortAddress=127.0.0.1',
        'admin.enableServer=false',
        'forceSync=no',
        `minSessionTimeout=${tickTimeMs * 2}`,
        `maxSessionTimeout=${Math.max(tickTimeMs * 20, 60_000)}`,
        '4lw.commands.whitelist=ruok,srvr',
        ...servers,
      ];
      await writeFile(member.configFile, `${config.join('\n')}\n`);
    }
    const ensemble = new ZooKeeperEnsemble(root, members, tickTimeMs);
    try {
      // Each member is ready once its port accepts; serving needs a quorum, so it is awaited after.
      await Promise.all(members.map((_, i) => ensemble.startMember(i)));
      await ensemble.waitServing(60_000);
    } catch (error) {
      await ensemble.stop();
      throw error;
    }
    return ensemble;
  }

  /** Every member, `127.0.0.1:<port>,...`: the backend's connectionString. */
  get connectionString(): string {
    return this.members.map((member) => `127.0.0.1:${member.clientPort}`).join(',');
  }

  get size(): number {
    return this.members.length;
  }

  clientPort(index: number): number {
    return this.members[index].clientPort;
  }

  /** What member `index` says it is now (`srvr`); undefined when it is down or serves no clients. */
  async role(index: number): Promise<ZooKeeperRole> {
    if (!this.members[index].server?.running) return undefined;
    const answer = await fourLetterWord(this.members[index].clientPort, 'srvr').catch(() => '');
    const mode = /^Mode: (\w+)/m.exec(answer)?.[1];
    return mode === 'leader' || mode === 'follower' ? mode : undefined;
  }

  /** Index of the member that leads now; throws when none does. */
  async leaderIndex(): Promise<number> {
    const roles = await Promise.all(this.members.map((_, i) => this.role(i)));
    const index = roles.indexOf('leader');
    if (index < 0) throw new Error(`no ZooKeeper member leads (roles: ${roles.map((role) => role ?? 'none').join(', ')})`);
    return index;
  }

  /** SIGKILL: the member is gone with no goodbye, its sockets closed by the kernel. */
  async kill(index: number): Promise<void> {
    await this.members[index].server?.stop('SIGKILL');
  }

  /** Starts a killed member again, on its ports and data; it rejoins once it has synced. */
  async revive(index: number): Promise<void> {
    await this.startMember(index);
  }

  /** Every member running and serving again, whatever a test left behind. */
  async restore(timeoutMs = 60_000): Promise<void> {
    await Promise.all(this.members.map((member, index) => (member.server?.running ? undefined : this.revive(index))));
    await this.waitServing(timeoutMs);
  }

  /** Resolves once every running member serves clients, one of them as leader. */
  async waitServing(timeoutMs: number): Promise<void> {
    const deadline = Date.now() + timeoutMs;
    for (;;) {
      const live = this.members.map((member, i) => (member.server?.running ? i : -1)).filter((i) => i >= 0);
      const roles = await Promise.all(live.map((i) => this.role(i)));
      if (roles.every((role) => role !== undefined) && roles.includes('leader')) return;
      if (Date.now() > deadline) {
        const output = this.members.map((member) => `member ${member.id}: ${member.server?.recentOutput.slice(-1_000) ?? '(not running)'}`).join('\n');
        throw new Error(`ZooKeeper ensemble not serving after ${timeoutMs} ms (roles: ${roles.map((role) => role ?? 'none').join(', ')}). Output:\n${output}`);
      }
      await new Promise((resolve) => setTimeout(resolve, 100));
    }
  }

  async stop(): Promise<void> {
    await Promise.all(this.members.map((member) => member.server?.stop()));
    await rm(this.root, { recursive: true, force: true });
  }

  private async startMember(index: number): Promise<void> {
    const member = this.members[index];
    member.server = await ServerProcess.start({
      name: `zookeeper member ${member.id} on 127.0.0.1:${member.clientPort}`,
      command: 'java',
      // A small heap: three members and other suites share a 2-core machine.
      args: ['-Xmx128m', '-XX:+UseSerialGC', '-cp', ZOOKEEPER_JAR, 'org.apache.zookeeper.server.quorum.QuorumPeerMain', member.configFile],
      port: member.clientPort,
      startTimeoutMs: 60_000,
    });
  }
}
