import type { IKeyValue } from 'etcd3';
import { createRevision } from './etcd-requests';

/** A waiter of this process that waits on a key of this process too. */
export interface LocalFollower {
  /** A key it waits on is gone: look again at the queue. */
  predecessorGone(): void;
}

/**
 * When a key a waiter waits on belongs to the same session (this process), the waiter
 * needs no watch: every deletion of that key is made (or learnt) here, and tells the waiter
 * directly. This saves a watch and a check per queued batch of a busy process.
 *
 * A waiter learns its predecessor from a read that may answer after the predecessor's deletion
 * was already reported here; deletions are therefore remembered for `rememberMs` (longer than a
 * call's deadline, so any read that saw the key answered within it), and a waiter that follows
 * a key deleted meanwhile is told to look again at once.
 */
export class LocalFollowers {
  /** Several waiters may follow one key: readers of different batches wait for the same write entry. */
  private readonly followers = new Map<string, Set<LocalFollower>>();
  /**
   * Keys deleted recently, oldest first, with when and the create revision deleted (undefined: by
   * name, whatever it was). A session reuses its key names (EntrySlots), so a read may show a
   * newer key of a name deleted just before: that one is not gone.
   */
  private readonly deleted = new Map<string, { at: number; revision?: bigint }>();

  constructor(private readonly rememberMs: number) {}

  /**
   * False when the key was deleted recently: the follower must look again now. It is registered
   * either way, so that if the key is there after all (a put that committed after its call
   * failed and after it was deleted by name), its next deletion still wakes the follower.
   */
  follow(predecessor: IKeyValue, follower: LocalFollower): boolean {
    const id = predecessor.key.toString('latin1');
    const followers = this.followers.get(id);
    if (followers) followers.add(follower);
    else this.followers.set(id, new Set([follower]));
    const deleted = this.deleted.get(id);
    return deleted === undefined || (deleted.revision !== undefined && deleted.revision !== createRevision(predecessor));
  }

  unfollow(key: Buffer, follower: LocalFollower): void {
    const id = key.toString('latin1');
    const followers = this.followers.get(id);
    if (followers?.delete(follower) && followers.size === 0) this.followers.delete(id);
  }

  /**
   * The key is gone (deleted here, or found missing), the one created at `revision` when known: wake its followers. `mayBeFollowed`: some
   * acquisition of this process is in flight and may yet read the key; with none, a later read
   * cannot see it, and there is nothing to remember.
   */
  gone(key: Buffer, revision: bigint | undefined, mayBeFollowed: boolean): void {
    const id = key.toString('latin1');
    const followers = this.followers.get(id);
    this.followers.delete(id);
    if (mayBeFollowed) this.remember(id, revision);
    if (followers) for (const follower of followers) follower.predecessorGone();
  }

  private remember(id: string, revision: bigint | undefined): void {
    const now = performance.now();
    for (const [old, { at }] of this.deleted) {
      if (now - at < this.rememberMs) break;
      this.deleted.delete(old);
    }
    this.deleted.delete(id);
    this.deleted.set(id, { at: now, revision });
  }

  clear(): void {
    this.followers.clear();
    this.deleted.clear();
  }
}
