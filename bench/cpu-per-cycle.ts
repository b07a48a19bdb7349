import { median } from './stats';
import type { LockRunner } from './workloads';

/** CPU time per uncontended cycle, in microseconds: this process's, and the server's. */
export interface CpuPerCycle {
  clientUs: number;
  serverUs: number;
}

/**
 * Where an uncontended cycle's time goes, for runners that make the same round trips: the CPU
 * each spends per cycle in this process (`process.cpuUsage`) and in the server (`serverCpuUs`,
 * e.g. from Redis' `INFO cpu`). On two shared cores both are on the cycle's path, and unlike
 * wall time they barely move with the machine's load. Alternating rounds, medians.
 */
export async function cpuPerCycle<K>(runners: ReadonlyMap<K, LockRunner>, serverCpuUs: () => Promise<number>, rounds = 7, cycles = 500): Promise<Map<K, CpuPerCycle>> {
  const samples = new Map<K, { client: number[]; server: number[] }>([...runners.keys()].map((key) => [key, { client: [], server: [] }]));
  for (let round = 0; round < rounds; round++) {
    const keys = [...runners.keys()];
    for (const key of round % 2 === 0 ? keys : keys.reverse()) {
      const name = `bench-cpu-${process.pid}-${round}`;
      const server = await serverCpuUs();
      const client = process.cpuUsage();
      for (let i = 0; i < cycles; i++) await runners.get(key)!(name, () => undefined);
      const used = process.cpuUsage(client);
      const serverUsed = (await serverCpuUs()) - server;
      samples.get(key)!.client.push((used.user + used.system) / cycles);
      samples.get(key)!.server.push(serverUsed / cycles);
    }
  }
  return new Map([...samples].map(([key, { client, server }]) => [key, { clientUs: median(client), serverUs: median(server) }]));
}
