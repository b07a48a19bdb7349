import type { AcquireRequest, LockGrant } from '../lock-backend.interface';
import type { PendingWait } from '../pending-wait';
import type { EtcdAcquisition } from './etcd-acquisition';
import type { LockKeys } from './etcd-keys';
import type { EtcdSession } from './etcd-session';

/**
 * Bits of a fencing token left for the turn within a batch: the token of the n-th caller served
 * under one key is `(create revision << 16) + n`. Strictly increasing across processes: a key
 * granted later has a higher create revision (the lowest revision holds), and within a batch n
 * grows. A batch takes at most 2^16 callers, so a token stays far inside a signed 64-bit column
 * (up to revision 2^47).
 */
export const TOKEN_TURN_BITS = 16n;
const BATCH_LIMIT = 2 ** Number(TOKEN_TURN_BITS);

/** One caller of this process waiting for one name. */
export interface Member {
  readonly request: AcquireRequest;
  readonly wait: PendingWait<LockGrant>;
}

/**
 * Callers of this process queued behind one etcd key. The callers that arrive before the key is
 * put share it, and are served one after the other while it is the lowest key under the name:
 * a burst of a thousand callers costs one put and one delete. A caller that arrives once the
 * key's put is sent joins the next batch (another key, put behind whatever queued meanwhile in
 * other processes), so that the queue stays first come first served across processes.
 */
export class Batch {
  /** open: taking callers, no put yet; sending: waiting for a session or the put's answer; queued: in etcd's queue; holding: the lowest key. */
  state: 'open' | 'sending' | 'queued' | 'holding' | 'ended' = 'open';
  private readonly members: Member[] = [];
  private joined = 0;
  private served = 0n;
  /** Our key's create revision, once the put answered. */
  revision?: bigint;
  keys?: LockKeys;
  session?: EtcdSession;
  acquisition?: EtcdAcquisition;
  /** The owner served now, if any. */
  holder?: string;

  constructor(
    readonly name: string,
    /** Unique within the process: the last part of the key. */
    readonly id: string,
  ) {}

  get full(): boolean {
    return this.joined >= BATCH_LIMIT;
  }

  add(member: Member): void {
    this.members.push(member);
    this.joined++;
  }

  /** Some caller still waits. */
  get hasMembers(): boolean {
    return this.members.some((member) => !member.wait.isSettled);
  }

  /** The next caller still waiting, taken off the batch. */
  next(): Member | undefined {
    for (let member = this.members.shift(); member; member = this.members.shift()) if (!member.wait.isSettled) return member;
    return undefined;
  }

  /** The next turn's fencing token. */
  token(): bigint {
    return (this.revision! << TOKEN_TURN_BITS) + this.served++;
  }

  /** Ends every wait still pending with `error`. */
  rejectAll(error: unknown): void {
    for (const member of this.members.splice(0)) member.wait.reject(error);
  }
}

/** Batch ids are never reused in a process: a key once deleted is remembered (LocalFollowers). */
let batchSeq = 0;

/** The batches of one name in this process, oldest first. */
export class LocalQueue {
  readonly batches: Batch[] = [];
  /** A pump is due on the next turn of the event loop. */
  pumpScheduled = false;

  constructor(readonly name: string) {}

  /** The batch a new caller joins: the newest, while its key is not put yet. */
  join(member: Member): Batch {
    let batch = this.batches.at(-1);
    if (!batch || batch.state !== 'open' || batch.full) {
      batch = new Batch(this.name, `~q${(batchSeq++).toString(36)}`);
      this.batches.push(batch);
    }
    batch.add(member);
    return batch;
  }

  /**
   * The batch whose put may go now: one at a time per name, each once the put before it has
   * answered, so keys are created in the order their callers arrived.
   */
  sendable(): Batch | undefined {
    for (const batch of this.batches) {
      if (batch.state === 'open') return batch;
      if (batch.state === 'sending') return undefined;
    }
    return undefined;
  }

  remove(batch: Batch): void {
    const index = this.batches.indexOf(batch);
    if (index >= 0) this.batches.splice(index, 1);
  }

  get empty(): boolean {
    return this.batches.length === 0;
  }
}
