import type { IKeyValue, ITxnRequest, ITxnResponse } from 'etcd3';
import type { LockKeys } from './etcd-keys';
import { deleteOwnTxn, lowestAfterDelete } from './etcd-requests';
import type { EtcdSession } from './etcd-session';
import type { LocalFollowers } from './local-followers';

/**
 * A put whose call failed may still commit: etcd had accepted the proposal when the deadline
 * passed. Its key is deleted by name at once and again this long after: past etcd's own request
 * timeout (5 s + 2 election timeouts: 7 s by default), after which a proposal has in practice
 * committed or been dropped.
 */
export const LATE_PUT_MS = 9_000;

/**
 * The deletion of the backend's keys: fenced on the create revision, retried in the background
 * while the session lives (its keepalives would keep a forgotten key, and the queue behind it,
 * alive), and told to this process: a batch that the answer shows as the lowest key is granted
 * from it, a follower of the key is woken (LocalFollowers).
 */
export class EtcdKeyDeletes {
  private readonly timers = new Set<NodeJS.Timeout>();
  private stopped = false;

  constructor(
    private readonly txn: (session: EtcdSession, operation: string, request: ITxnRequest) => Promise<ITxnResponse>,
    /** A delete's answer read this key as the lowest under the name. */
    private readonly lowestNow: (lowest: IKeyValue) => void,
    private readonly localFollowers: LocalFollowers,
    /** Some acquisition of this process may yet read a deleted key (see LocalFollowers.gone). */
    private readonly mayBeFollowed: () => boolean,
  ) {}

  /** Deletes our key (by name when `revision` is unknown); rejects when this attempt failed. */
  delete(keys: LockKeys, revision: bigint | undefined, session: EtcdSession, attempt = 0): Promise<void> {
    return this.txn(session, 'release a lock', deleteOwnTxn(keys, revision)).then(
      (response) => {
        const lowest = lowestAfterDelete(response);
        if (lowest && !this.stopped) this.lowestNow(lowest);
        this.localFollowers.gone(keys.own, revision, this.mayBeFollowed());
        // After the lowest key was acted on: a new entry under this name may reuse the key's name.
        if (revision !== undefined) keys.slot?.free(BigInt(response.header.revision));
      },
      (error) => {
        if (session.alive && !this.stopped) {
          this.later(Math.min(2_000, 100 * 2 ** attempt), () => void this.delete(keys, revision, session, attempt + 1).catch(() => undefined));
        }
        throw error;
      },
    );
  }

  /**
   * Deletes a key whose put failed in flight, by name: now, and once more LATE_PUT_MS later, for
   * a put that commits after its call failed. Left alone, such a key of this live session would
   * block the name until the process ends; its deletion wakes a follower of this process too.
   */
  deleteUnsure(keys: LockKeys, session: EtcdSession): void {
    keys.slot?.retire();
    void this.delete(keys, undefined, session).catch(() => undefined);
    this.later(LATE_PUT_MS, () => {
      if (session.alive) void this.delete(keys, undefined, session).catch(() => undefined);
    });
  }

  /** The backend closed: no more retries (its session's revoke deletes what is left). */
  stop(): void {
    this.stopped = true;
    for (const timer of this.timers) clearTimeout(timer);
  }

  /** Runs `run` after `ms` unless stopped first. */
  private later(ms: number, run: () => void): void {
    const timer = setTimeout(() => {
      this.timers.delete(timer);
      if (!this.stopped) run();
    }, ms);
    timer.unref();
    this.timers.add(timer);
  }
}
