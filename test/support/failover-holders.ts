import type { DistributedLockModuleOptions, LockService } from '../../lib';
import { HolderProcess } from './holder-process';
import { eventually, type HoldInterval } from './timing';

/** One withLock run in a holder process: what it reported, once it is done. */
export interface HolderRun {
  readonly label: string;
  readonly holdMs: number;
  /** The handler began: `at`, process.hrtime.bigint() then, as a string. */
  readonly entered: Promise<{ fencingToken: string; at: string; held: boolean }>;
  readonly done: Promise<{ error?: { name: string; message: string; reason?: string } }>;
  /** Its critical section (grant to handler end, or to the lost signal if that came first), once reported. */
  sections(): { fencingToken: string; start: string; end: string; cutShort: boolean }[];
}

/**
 * Processes queued on lock names of a clustered server while its leader fails: each a holder
 * process (its own Nest app and session or connections) on the same module options. Records
 * each process's critical sections, from the grant to the lost signal or the handler's end,
 * on the one clock every process shares (process.hrtime.bigint(), CLOCK_MONOTONIC).
 */
export class FailoverHolders {
  private readonly processes: HolderProcess[] = [];

  constructor(private readonly options: () => DistributedLockModuleOptions) {}

  /** Starts `count` processes (in parallel: each takes about a second to come up). */
  async start(count: number): Promise<HolderProcess[]> {
    const started = await Promise.all(Array.from({ length: count }, () => HolderProcess.withModule(this.options())));
    this.processes.push(...started);
    return started;
  }

  /** withLock(name) in `holder` for `holdMs` (cut short by the lost signal). */
  withLock(holder: HolderProcess, label: string, name: string, holdMs: number, waitTimeoutMs = 60_000): HolderRun {
    const { entered, done, sections } = holder.withLock(name, { holdMs, waitTimeoutMs }, waitTimeoutMs + 10_000);
    return { label, holdMs, entered, done, sections };
  }

  /** The sections of `runs`, as assertExclusive takes them. */
  intervals(runs: readonly HolderRun[]): HoldInterval[] {
    return runs.flatMap((run) =>
      run.sections().map((section) => ({ start: BigInt(section.start), end: BigInt(section.end), fencingToken: BigInt(section.fencingToken), holder: run.label })),
    );
  }

  async stop(): Promise<void> {
    await Promise.all(this.processes.splice(0).map((holder) => holder.stop()));
  }
}

/** Resolves once `name` has a holder and `waiting` entries queued behind it, as `inspector` sees them. */
export function queuedBehind(inspector: LockService, name: string, waiting: number): Promise<void> {
  return eventually(
    async () => {
      const seen = await inspector.inspect(name);
      return seen.holder !== undefined && seen.waiting === waiting;
    },
    15_000,
    async () => `a holder and ${waiting} waiters on "${name}" (seen: ${JSON.stringify(await inspector.inspect(name).catch(String))})`,
    20,
  );
}

/** Milliseconds from `from` to `at`, both process.hrtime.bigint() values (as strings or bigints). */
export function msAfter(at: string | bigint, from: bigint): number {
  return Number(BigInt(at) - from) / 1e6;
}
