import { readFileSync } from 'node:fs';

/**
 * The fields of a `/proc/.../stat` line after the parenthesised command name (which may hold
 * spaces and parentheses): [0] is the state, [1] the parent's pid, [11] and [12] utime and stime
 * (Linux).
 */
export function procStatFields(statPath: string): string[] {
  const stat = readFileSync(statPath, 'utf8');
  return stat.slice(stat.lastIndexOf(')') + 2).split(' ');
}

/** A process's user + system CPU time so far, in us (read in clock ticks of 10 ms). */
export function processCpuUs(pid: number): number {
  const fields = procStatFields(`/proc/${pid}/stat`);
  return ((Number(fields[11]) + Number(fields[12])) * 1e6) / 100;
}
