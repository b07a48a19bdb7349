/** A waiter of this process whose predecessor is a key of this process too. */
export interface LocalFollower {
  /** The predecessor's key is gone: look again at the queue. */
  predecessorGone(): void;
  /**
   * The predecessor held the lock and let go while its lease was known valid until `validUntil`
   * (a performance.now() time): the lock is ours, with no read needed, under that validity until
   * etcd has the predecessor's delete.
   */
  predecessorReleased(validUntil: number): void;
}

/**
 * When the key just before a waiter's belongs to the same session (this process), the waiter
 * needs no watch: every deletion of that key is made (or learnt) here, and tells the waiter
 * directly. This saves a watch and a check per waiter of a busy process.
 *
 * A waiter learns its predecessor from a read that may answer after the predecessor's deletion
 * was already reported here; deletions are therefore remembered for `rememberMs` (longer than a
 * call's deadline, so any read that saw the key answered within it), and a waiter that follows
 * a key deleted meanwhile is told to look again at once.
 */
export class LocalFollowers {
  private readonly followers = new Map<string, LocalFollower>();
  /** Keys deleted recently, oldest first, with when. */
  private readonly deleted = new Map<string, number>();

  constructor(private readonly rememberMs: number) {}

  /**
   * False when the key was deleted recently: the follower must look again now. It is registered
   * either way, so that if the key is there after all (a put that committed after its call
   * failed and after it was deleted by name), its next deletion still wakes the follower.
   */
  follow(key: Buffer, follower: LocalFollower): boolean {
    const id = key.toString('latin1');
    this.followers.set(id, follower);
    return !this.deleted.has(id);
  }

  unfollow(key: Buffer, follower: LocalFollower): void {
    const id = key.toString('latin1');
    if (this.followers.get(id) === follower) this.followers.delete(id);
  }

  /**
   * The lock holder with this key let go while its lease was known valid until `validUntil` (its
   * delete is still on its way): its follower holds the lock from now. The holder's key was the
   * lowest, so the follower's is the lowest but for it, and both are this session's, so no other
   * process can be granted until both are gone. The follower's token (its create revision) is
   * above the holder's. Hands over through the process without waiting for etcd: a queue of this
   * process's callers moves at the speed of the process, while etcd gets the deletes, batched.
   * Only a holder whose lease is known valid may hand over: one whose lease ran out (no quorum,
   * say) cannot tell whether its key, and so the lock, is still there.
   */
  handOver(key: Buffer, validUntil: number): void {
    const id = key.toString('latin1');
    const follower = this.followers.get(id);
    this.followers.delete(id);
    follower?.predecessorReleased(validUntil);
  }

  /**
   * The key is gone (deleted here, or found missing): wake its follower. `mayBeFollowed`: some
   * acquisition of this process is in flight and may yet read the key; with none, a later read
   * cannot see it, and there is nothing to remember.
   */
  gone(key: Buffer, mayBeFollowed: boolean): void {
    const id = key.toString('latin1');
    const follower = this.followers.get(id);
    this.followers.delete(id);
    if (mayBeFollowed) this.remember(id);
    follower?.predecessorGone();
  }

  private remember(id: string): void {
    const now = performance.now();
    for (const [old, at] of this.deleted) {
      if (now - at < this.rememberMs) break;
      this.deleted.delete(old);
    }
    this.deleted.delete(id);
    this.deleted.set(id, now);
  }

  clear(): void {
    this.followers.clear();
    this.deleted.clear();
  }
}
