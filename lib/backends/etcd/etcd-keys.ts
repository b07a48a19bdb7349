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
  /**
   * Lock-delay keys of the name: `<escaped name>%delay/...`. A holder with a lock-delay
   * puts `delayOwn` there (`<escaped name>%delay/<lease id, hex>/<entry>`) on a lease that
   * outlives its session by the delay (DelayLeases), and deletes it with its lock key. Outside
   * every contender range: no escaped name starts with '/'.
   */
  readonly delayStart: Buffer;
  readonly delayEnd: Buffer;
  /** Set for an entry with a lock-delay. */
  readonly delayOwn?: Buffer;
}

export function lockKeys(name: string, leaseId: string, entry: string, slot?: EntrySlot, lockDelayMs = 0): LockKeys {
  const { start, end } = contenderRange(name);
  const suffix = `${BigInt(leaseId).toString(16)}/${entry}`;
  const own = Buffer.concat([start, Buffer.from(suffix)]);
  return { start, end, own, slot, ...delayRange(start, end), delayOwn: lockDelayMs > 0 ? delayKeyFor(own) : undefined };
}

/**
 * Put between the escaped name and its '/': under the name, so under the keyPrefix a user's
 * permissions are limited to, yet in no contender range, since an escaped name never has a '%'
 * that is not followed by '25' or '2F'.
 */
const DELAY_MARK = Buffer.from('%delay');

/** The name's lock-delay keys (LockKeys.delayStart and delayEnd), given its contender range. */
function delayRange(start: Buffer, end: Buffer): Pick<LockKeys, 'delayStart' | 'delayEnd'> {
  return { delayStart: withDelayMark(start), delayEnd: withDelayMark(end) };
}

/** `<escaped name>` + DELAY_MARK + the rest, for any key or range bound that starts with the escaped name and its '/' (or the byte after it). */
function withDelayMark(key: Buffer): Buffer {
  const nameEnd = key.indexOf('/') === -1 ? key.length - 1 : key.indexOf('/');
  return Buffer.concat([key.subarray(0, nameEnd), DELAY_MARK, key.subarray(nameEnd)]);
}

/** The lock-delay key of the entry whose lock key is `own` (see LockKeys.delayOwn). */
export function delayKeyFor(own: Buffer): Buffer {
  return withDelayMark(own);
}

/**
 * The keys of etcd's own Lock service (and etcdctl, Go's Mutex): `<escaped name>/<lease hex>`,
 * one key per name and session lease, so a process has at most one entry of a name at a time
 * (LockApiTurns). The escaped name is what the Lock request names.
 */
export function lockApiKeys(name: string, leaseId: string): LockKeys {
  const { start, end } = contenderRange(name);
  return { start, end, own: Buffer.concat([start, Buffer.from(BigInt(leaseId).toString(16))]), ...delayRange(start, end) };
}

/** The range of every contender of a lock name (see LockKeys.start and end). */
export function contenderRange(name: string): Pick<LockKeys, 'start' | 'end'> {
  const start = Buffer.from(`${escaped(name)}/`);
  // The prefix ends in '/', so bumping that last byte gives the first key past the range.
  return { start, end: Buffer.concat([start.subarray(0, -1), Buffer.from([start[start.length - 1] + 1])]) };
}

/** A name with no '/' left in it ('%' -> '%25', '/' -> '%2F'). */
function escaped(name: string): string {
  return name.replace(/[%/]/g, (c) => (c === '%' ? '%25' : '%2F'));
}

/**
 * Where a session's holder description is kept, put with the session's lease (so it goes with
 * it): `<escaped keyPrefix>.holder.<lease id, hex>`. It has no '/', so it is in no lock's
 * contender range, whatever the names; under the keyPrefix, so a user limited to it may write it.
 */
export function holderRecordKey(keyPrefix: string, leaseId: string): Buffer {
  return Buffer.from(`${escaped(keyPrefix)}.holder.${BigInt(leaseId).toString(16)}`);
}
