import { mkdtemp, rm } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { Etcd3 } from 'etcd3';
import { distinctPorts } from './free-port';
import { ServerProcess } from './server-process';
import type { TestCertificates } from './test-certificates';

/**
 * Fast elections so failover tests finish in seconds: a heartbeat every 50 ms and an election
 * after 500 ms of silence. etcd's minimum lease ttl is 1.5 election timeouts (750 ms), so the
 * shortest session lease here is 1 s.
 */
const HEARTBEAT_MS = 50;
const ELECTION_TIMEOUT_MS = 500;

export interface EtcdClusterOptions {
  /**
   * Serve clients over https only, with these certificates' server certificate, and require a
   * client certificate signed by their CA (`--client-cert-auth`). Peers stay on plain http.
   */
  tls?: TestCertificates;
}

interface Member {
  readonly name: string;
  readonly clientUrl: string;
  server?: ServerProcess;
  paused?: boolean;
}

/**
 * A throwaway etcd (Debian's etcd-server) of one or more members on free loopback ports, data
 * under os.tmpdir(), removed by stop(). Start fails loudly when etcd cannot come up.
 */
export class EtcdCluster {
  private constructor(
    private readonly dataRoot: string,
    private readonly members: Member[],
    private readonly args: string[][],
    private readonly tls: TestCertificates | undefined,
  ) {}

  static async start(size = 1, options: EtcdClusterOptions = {}): Promise<EtcdCluster> {
    const { tls } = options;
    const dataRoot = await mkdtemp(path.join(os.tmpdir(), 'etcd-test-'));
    const ports = await distinctPorts(size * 2);
    const names = Array.from({ length: size }, (_, i) => `n${i + 1}`);
    const peerUrl = (i: number) => `http://127.0.0.1:${ports[size + i]}`;
    const initialCluster = names.map((name, i) => `${name}=${peerUrl(i)}`).join(',');
    const members: Member[] = names.map((name, i) => ({ name, clientUrl: `${tls ? 'https' : 'http'}://127.0.0.1:${ports[i]}` }));
    const tlsArgs = tls
      ? ['--cert-file', tls.server.certFile, '--key-file', tls.server.keyFile, '--client-cert-auth', '--trusted-ca-file', tls.caFile]
      : [];
    const args = names.map((name, i) => [
      '--name', name,
      '--data-dir', path.join(dataRoot, name),
      '--listen-client-urls', members[i].clientUrl,
      '--advertise-client-urls', members[i].clientUrl,
      '--listen-peer-urls', peerUrl(i),
      '--initial-advertise-peer-urls', peerUrl(i),
      '--initial-cluster', initialCluster,
      '--initial-cluster-state', 'new',
      '--heartbeat-interval', String(HEARTBEAT_MS),
      '--election-timeout', String(ELECTION_TIMEOUT_MS),
      ...tlsArgs,
    ]);
    const cluster = new EtcdCluster(dataRoot, members, args, tls);
    try {
      await Promise.all(members.map((_, i) => cluster.startMember(i)));
      await cluster.waitHealthy(30_000);
    } catch (error) {
      await cluster.stop();
      throw error;
    }
    return cluster;
  }

  /** Client URLs of all members, for `hosts`. */
  get hosts(): string[] {
    return this.members.map((member) => member.clientUrl);
  }

  hostOf(index: number): string {
    return this.members[index].clientUrl;
  }

  /** etcd3's `credentials` that this cluster accepts (its CA, and a client certificate it signed); undefined without TLS. */
  get credentials(): { rootCertificate: Buffer; privateKey: Buffer; certChain: Buffer } | undefined {
    return this.tls && { rootCertificate: this.tls.ca, privateKey: this.tls.client.key, certChain: this.tls.client.cert };
  }

  /** Index of the member that currently leads, from the live members' own status. */
  async leaderIndex(): Promise<number> {
    const statuses = await Promise.all(
      this.members.map(async (member) => {
        if (!member.server) return undefined;
        const client = new Etcd3({ hosts: member.clientUrl, credentials: this.credentials });
        try {
          return await client.maintenance.status({ deadline: Date.now() + 2_000 });
        } catch {
          return undefined;
        } finally {
          client.close();
        }
      }),
    );
    const leader = statuses.find((status) => status && status.leader !== '0')?.leader;
    const index = statuses.findIndex((status) => status !== undefined && status.header.member_id === leader);
    if (index < 0) throw new Error('no live etcd member leads');
    return index;
  }

  /**
   * gRPC messages member `index` has received since it started (each unary call is one, each
   * keepalive or watch request on a stream one more), in all and by method, from its /metrics
   * (grpc_server_msg_received_total). Plain http members only: over TLS /metrics wants a client certificate.
   */
  async messagesReceived(index = 0): Promise<{ total: number; byMethod: Record<string, number> }> {
    const text = await (await fetch(`${this.members[index].clientUrl}/metrics`)).text();
    const byMethod: Record<string, number> = {};
    let total = 0;
    for (const [, labels, value] of text.matchAll(/^grpc_server_msg_received_total\{([^}]*)\} (\S+)$/gm)) {
      const method = /grpc_method="([^"]*)"/.exec(labels)?.[1] ?? '?';
      byMethod[method] = (byMethod[method] ?? 0) + Number(value);
      total += Number(value);
    }
    return { total, byMethod };
  }

  /** SIGKILL: the member is gone with no goodbye, as in a crash. */
  async kill(index: number): Promise<void> {
    await this.members[index].server?.stop('SIGKILL');
    this.members[index].server = undefined;
  }

  /** SIGSTOP / SIGCONT: the member stops answering, with its connections left open. */
  pause(index: number): void {
    this.members[index].server?.pause();
    this.members[index].paused = true;
  }

  resume(index: number): void {
    this.members[index].server?.resume();
    this.members[index].paused = false;
  }

  /** Starts a killed member again, on its ports and data. */
  async revive(index: number): Promise<void> {
    await this.startMember(index);
  }

  /**
   * Every member running and answering again, whatever a test left behind (after a failed
   * assertion, say), so that one failed fault test does not fail the ones after it.
   */
  async restore(timeoutMs = 20_000): Promise<void> {
    for (const [index, member] of this.members.entries()) if (member.paused) this.resume(index);
    await Promise.all(this.members.map((member, index) => (member.server ? undefined : this.revive(index))));
    await this.waitHealthy(timeoutMs);
  }

  /** Resolves once a linearizable read succeeds through every live member. */
  async waitHealthy(timeoutMs: number): Promise<void> {
    const deadline = Date.now() + timeoutMs;
    for (const member of this.members.filter((m) => m.server)) {
      const client = new Etcd3({ hosts: member.clientUrl, credentials: this.credentials });
      try {
        for (;;) {
          try {
            await client.get('health-probe').string().then(() => undefined);
            break;
          } catch (error) {
            if (Date.now() > deadline) throw new Error(`etcd member ${member.name} not healthy after ${timeoutMs} ms: ${String(error)}`);
            await new Promise((resolve) => setTimeout(resolve, 100));
          }
        }
      } finally {
        client.close();
      }
    }
  }

  async stop(): Promise<void> {
    await Promise.all(this.members.map((member) => member.server?.stop()));
    for (const member of this.members) member.server = undefined;
    await rm(this.dataRoot, { recursive: true, force: true });
  }

  private async startMember(index: number): Promise<void> {
    const member = this.members[index];
    member.server = await ServerProcess.start({
      name: `etcd ${member.name} on ${member.clientUrl}`,
      command: 'etcd',
      args: this.args[index],
      port: Number(new URL(member.clientUrl).port),
    });
  }
}
