#!/usr/bin/env node
import { DistributedLockError } from '../errors';
import { doctorText } from './doctor-text';
import { doctorTarget } from './doctor-target';
import { doctorExitCode, runDoctor } from './run-doctor';

const USAGE = `Usage: nest-distributed-lock doctor <backend URL | several redis:// URLs | JSON options> [--json] [--ttl-ms N] [--server-timeout-ms N]

Checks what the lock servers let a client read (eviction, persistence, replication, versions,
session timeouts, clocks) and prints each finding with its consequence for locks and the setting
to change. Exit status: 0 no findings, 1 findings, 2 a server could not be reached, 3 bad arguments.

  nest-distributed-lock doctor redis://127.0.0.1:6379
  nest-distributed-lock doctor redis://a:6379 redis://b:6379 redis://c:6379      (redlock)
  nest-distributed-lock doctor postgres://user@db:5432/app
  nest-distributed-lock doctor etcd://10.0.0.1:2379,10.0.0.2:2379
  nest-distributed-lock doctor zookeeper://zk1:2181,zk2:2181 --ttl-ms 10000
  nest-distributed-lock doctor '{"backend":{"type":"redis","url":"redis://cache:6379"},"ttlMs":10000}'`;

/** Bad arguments or options: not a finding about a server, so not 1 or 2. */
const USAGE_EXIT = 3;

async function main(argv: string[]): Promise<number> {
  const [command, ...rest] = argv;
  if (command === '--help' || command === '-h' || command === undefined) {
    console.log(USAGE);
    return command === undefined ? USAGE_EXIT : 0;
  }
  if (command !== 'doctor') {
    console.error(`Unknown command ${JSON.stringify(command)}.\n\n${USAGE}`);
    return USAGE_EXIT;
  }
  const { args, json, ttlMs, serverTimeoutMs } = parseFlags(rest);
  const target = doctorTarget(args, { ttlMs, serverTimeoutMs });
  const report = await runDoctor(target.backend, target.settings);
  console.log(json ? JSON.stringify(report, null, 2) : doctorText(report));
  return doctorExitCode(report);
}

function parseFlags(argv: string[]): { args: string[]; json: boolean; ttlMs?: number; serverTimeoutMs?: number } {
  const args: string[] = [];
  let json = false;
  let ttlMs: number | undefined;
  let serverTimeoutMs: number | undefined;
  for (let i = 0; i < argv.length; i++) {
    const arg = argv[i];
    if (arg === '--json') json = true;
    else if (arg === '--ttl-ms') ttlMs = milliseconds(arg, argv[++i]);
    else if (arg === '--server-timeout-ms') serverTimeoutMs = milliseconds(arg, argv[++i]);
    else if (arg.startsWith('--')) throw new UsageError(`unknown flag ${arg}`);
    else args.push(arg);
  }
  return { args, json, ttlMs, serverTimeoutMs };
}

function milliseconds(flag: string, value: string | undefined): number {
  const ms = Number(value);
  if (value === undefined || !Number.isFinite(ms) || ms <= 0) throw new UsageError(`${flag} takes a number of milliseconds above 0, got ${value ?? 'nothing'}`);
  return ms;
}

class UsageError extends Error {}

main(process.argv.slice(2)).then(exit, (error: unknown) => {
  const known = error instanceof UsageError || error instanceof DistributedLockError;
  console.error(known ? `${(error as Error).message}\n\n${USAGE}` : error);
  exit(known ? USAGE_EXIT : 2);
});

/**
 * Exits once the output is written. The doctor closed its connections; should a client library
 * still keep a handle open (a gRPC channel closing), the process ends a second later anyway.
 */
function exit(code: number): void {
  process.exitCode = code;
  setTimeout(() => process.exit(code), 1_000).unref();
}
