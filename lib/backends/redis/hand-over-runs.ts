import { Logger } from '@nestjs/common';
import type { LockGrant } from '../lock-backend.interface';

const logger = new Logger('DistributedLock');

/**
 * A run of hand-overs inside this process on one key that Redis has not heard of yet: the lock
 * went from `from` (the owner Redis still has) to each of `to` in turn. Told to Redis in one
 * transfer script once the process is idle (process.nextTick runs after every pending promise
 * reaction), so a burst of this process's callers costs one command, not one per caller.
 */
export interface HandOverRun {
  readonly from: LockGrant;
  readonly to: { owner: string; fence: string }[];
  /** The last of `to` let go with no waiter of ours behind it: release it after the transfer. */
  released: boolean;
  /** Settles once Redis has the run: when it was sent, or undefined when refused. */
  readonly recorded: Promise<number | undefined>;
  record(sentAt: number | undefined): void;
  /** Every release folded into the run waits for this. */
  readonly done: Promise<void>;
  finish(): void;
}

/** What the runs need of the backend's commands. */
export interface HandOverCommands {
  /** The transfer script for `key` (ARGV: owner value, then owner, fence of each holder): its reply. */
  transfer(key: string, args: string[]): Promise<unknown>;
  /** Owner-checked release of the grant `fence` `owner`. */
  release(key: string, fence: string, owner: string): Promise<void>;
  /** A holder of a refused run: forget its grant and take it out of the queue. */
  takeBack(key: string, owner: string, fence: string): Promise<unknown>;
}

/** Per key, the hand-overs inside this process that Redis has not been told of yet. */
export class HandOverRuns {
  private readonly runs = new Map<string, HandOverRun>();

  constructor(private readonly commands: HandOverCommands) {}

  get(key: string): HandOverRun | undefined {
    return this.runs.get(key);
  }

  start(from: LockGrant): HandOverRun {
    let record!: (sentAt: number | undefined) => void;
    let finish!: () => void;
    const run: HandOverRun = {
      from,
      to: [],
      released: false,
      recorded: new Promise((resolve) => (record = resolve)),
      record,
      done: new Promise((resolve) => (finish = resolve)),
      finish,
    };
    this.runs.set(from.key, run);
    process.nextTick(() => this.tell(from.key));
    return run;
  }

  /**
   * `owner` (with the fence it queued with) holds the lock next in `run`; its grant is
   * provisional: valid for `validForMs` (the previous holder's lease) until Redis has the run.
   */
  extend(run: HandOverRun, owner: string, fence: string, validForMs: number): NonNullable<LockGrant['provisional']> {
    run.to.push({ owner, fence });
    return { validUntil: performance.now() + validForMs, recorded: run.recorded };
  }

  tellAll(): void {
    for (const key of [...this.runs.keys()]) this.tell(key);
  }

  /**
   * Sends the key's pending run, if any: before any other command on the key, so Redis always
   * hears of the hand-overs first. If Redis no longer has things as we believe (the owner's
   * lease vanished in a restart, a waiter was re-queued), nothing changes there, and every
   * holder of the run is told its lock is lost before the old owner is let go.
   */
  tell(key: string): void {
    const run = this.runs.get(key);
    if (!run) return;
    this.runs.delete(key);
    const last = run.to[run.to.length - 1];
    const fromValue = `${run.from.fencingToken} ${run.from.owner}`;
    const args = [fromValue];
    for (const { owner, fence } of run.to) args.push(owner, fence);
    const sentAt = performance.now();
    const transferred = this.commands.transfer(key, args).catch((error: unknown) => error);
    const lastReleased = run.released ? this.commands.release(key, last.fence, last.owner) : undefined;
    void transferred.then(async (outcome) => {
      if (outcome === 1) {
        run.record(sentAt);
      } else {
        run.record(undefined);
        const why = outcome === 0 ? 'the lease was gone' : outcome === 2 ? 'a waiter was re-queued' : (outcome as Error)?.message ?? String(outcome);
        logger.warn(`Handing "${key}" on inside this process failed (${why}); its holders were told the lock is lost.`);
        for (const { owner, fence } of run.to) await this.commands.takeBack(key, owner, fence);
        if (outcome !== 0) await this.commands.release(key, run.from.fencingToken.toString(), run.from.owner).catch(() => undefined);
      }
      await lastReleased?.catch(() => undefined);
      run.finish();
    });
  }
}
