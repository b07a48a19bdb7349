import type { EntrySlot } from './entry-slots';

/**
 * The etcd keys of one lock name: every contender (holder and waiters) puts
 * `<escaped name>/<session lease id, hex>/<entry>` with its session lease; the holder is the key
 * with the lowest create revision under `<escaped name>/`.
 *
 * The name is escaped ('%' -> '%25', '/' -> '%2F') so that it never contains '/': otherwise the
 * range of lock "a" (`a/`) would also cover the contenders of lock "a/b" (`a/b/...`).
 * The entry is part of the key because one process (one session lease) may have several
 * entries of one name in flight (see EntrySlots for why it is a reused number).
 */
export interface LockKeys {
  /** The contender range: every key starting with `<escaped name>/`. */
  readonly start: Buffer;
  readonly end: Buffer;
  /** This acquisition's own key. */
  readonly own: Buffer;
  /** What names `own` below the lease id, for a session's entries (EntrySlots). */
  readonly slot?: EntrySlot;
}

export function lockKeys(name: string, leaseId: string, entry: string, slot?: EntrySlot): LockKeys {
  const { start, end } = contenderRange(name);
  return { start, end, own: Buffer.concat([start, Buffer.from(`${BigInt(leaseId).toString(16)}/${entry}`)]), slot };
}

/**
 * The keys of etcd's own Lock service (and etcdctl, Go's Mutex): `<escaped name>/<lease hex>`,
 * one key per name and session lease, so a process has at most one entry of a name at a time
 * (LockApiTurns). The escaped name is what the Lock request names.
 */
export function lockApiKeys(name: string, leaseId: string): LockKeys {
  const { start, end } = contenderRange(name);
  return { start, end, own: Buffer.concat([start, Buffer.from(BigInt(leaseId).toString(16))]) };
}

/** The range of every contender of a lock name (see LockKeys.start and end). */
export function contenderRange(name: string): Pick<LockKeys, 'start' | 'end'> {
  const start = Buffer.from(`${name.replace(/[%/]/g, (c) => (c === '%' ? '%25' : '%2F'))}/`);
  // The prefix ends in '/', so bumping that last byte gives the first key past the range.
  return { start, end: Buffer.concat([start.subarray(0, -1), Buffer.from([start[start.length - 1] + 1])]) };
}
