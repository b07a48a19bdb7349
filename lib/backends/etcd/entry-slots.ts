/**
 * The last part of a session's key under a lock name: a small number, reused once the key it
 * named is known to be deleted, rather than an id unique to each entry.
 *
 * Why: etcd keeps the index of every deleted key until the cluster is compacted (standalone etcd
 * does not compact unless told to), and every range over a lock name walks all of them, so a new
 * key name per entry makes each acquisition of a busy name slower than the last (docs/etcd.md).
 * Reused names keep the index of a name as small as the number of entries the process ever had
 * in flight at once.
 */
export class EntrySlot {
  private done = false;

  constructor(
    readonly name: string,
    readonly number: number,
    /**
     * The revision at which the key this number named before was deleted (0 on first use): a
     * key of this name created after it is this entry's; one created before is not.
     */
    readonly sinceRevision: bigint,
    private readonly slots: EntrySlots,
  ) {}

  /** The entry's key is deleted (a delete fenced on its create revision answered at `revision`), or was never put: the number may name the next entry. Once only. */
  free(revision: bigint): void {
    if (this.done) return;
    this.done = true;
    this.slots.freed(this, revision);
  }

  /**
   * The key is deleted by name only, as its put's fate is unknown: the number is never used again
   * in this session, so that a second delete by name, or a put that commits late, cannot hit a
   * later entry's key.
   */
  retire(): void {
    this.done = true;
  }
}

/** One session's slots, per lock name. A name is forgotten once none of its slots is taken. */
export class EntrySlots {
  /** Per name, per slot number: null while taken, else the revision since which it is free. */
  private readonly names = new Map<string, Array<bigint | null>>();

  /** The lowest free number of `name`, or a new one. */
  take(name: string): EntrySlot {
    let slots = this.names.get(name);
    if (!slots) this.names.set(name, (slots = []));
    let number = slots.findIndex((freeSince) => freeSince !== null);
    if (number < 0) number = slots.length;
    const sinceRevision = slots[number] ?? 0n;
    slots[number] = null;
    return new EntrySlot(name, number, sinceRevision, this);
  }

  /** @internal EntrySlot.free's bookkeeping. */
  freed(slot: EntrySlot, revision: bigint): void {
    const slots = this.names.get(slot.name);
    if (!slots) return;
    slots[slot.number] = revision;
    if (slots.every((freeSince) => freeSince !== null)) this.names.delete(slot.name);
  }
}
