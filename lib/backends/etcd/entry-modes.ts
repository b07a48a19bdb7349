import type { IKeyValue } from 'etcd3';
import { LockConfigError } from '../../errors';
import { mayGo } from '../entry-rule';
import type { AcquireRequest, EntryMode } from '../lock-backend.interface';

/**
 * What an entry under a lock name asks for, read from its value. A write entry's value is empty,
 * as the keys of etcd's concurrency.Mutex (and `etcdctl lock`) are: a key of theirs under the
 * name is a write entry to us, and any key of ours ahead of theirs makes them wait, whatever it is.
 */
export interface EntryValue {
  readonly mode: EntryMode;
  /** For a permit: its semaphore's limit. */
  readonly limit?: number;
  /**
   * The owner id of the caller the entry was put for (write entries name none: a batch serves
   * many owners; readers of the process that join a read entry share it unnamed).
   */
  readonly owner?: string;
  /** A permit granted after waiting marks itself granted, which wakes the permit watching it (see decide). */
  readonly granted?: boolean;
}

const WRITE: EntryValue = { mode: 'write' };

/** The value of a read or permit entry: JSON, so an operator's `etcdctl get` shows what it is. */
export function encodeEntry(value: EntryValue): Buffer {
  return Buffer.from(JSON.stringify(value));
}

/** An empty or unreadable value is a write entry: the safe reading, since it blocks everyone behind it. */
export function decodeEntry(kv: IKeyValue): EntryValue {
  if (!kv.value || kv.value.length === 0) return WRITE;
  try {
    const value = JSON.parse(kv.value.toString()) as EntryValue;
    if (value.mode === 'read' || (value.mode === 'permit' && Number.isInteger(value.limit) && value.limit! > 0)) return value;
  } catch {
    // Not ours: treated as a write entry.
  }
  return WRITE;
}

/** What an entry does next, given the entries ahead of it. */
export type Decision =
  | { readonly kind: 'grant' }
  /**
   * Wait until one of these keys is deleted (`orMarked`: or, for the single key, rewritten as
   * granted); then read the entries ahead again.
   */
  | { readonly kind: 'wait'; readonly keys: readonly IKeyValue[]; readonly orMarked: boolean };

const GRANT: Decision = { kind: 'grant' };

/**
 * The grant rule (mayGo) over `ahead`, the entries created before ours, oldest first (for a
 * write, only the newest of them is read: it is all the rule needs), and otherwise the keys to
 * wait on: only keys whose change can let ours go, so that a release wakes one waiter, not all.
 * - write: the key just before ours, as etcd's Mutex does.
 * - read: the nearest write entry ahead; readers ahead do not matter, and a write further ahead
 *   is found by the read that follows its deletion.
 * - permit: with more than `limit` ahead and a permit just before ours, that permit waits too:
 *   ours can go only once it is deleted or marked granted, after which ours is the first waiting
 *   permit. Otherwise (the first waiting permit, or modes mixed on the name) the `limit` newest
 *   keys ahead: while they all stay, at least `limit` are ahead, and any of them going may let
 *   ours go. Never the oldest key alone: a release of a newer holder would not wake it.
 */
export function decide(mode: EntryMode, limit: number, ahead: readonly IKeyValue[]): Decision {
  let lastWrite = -1;
  if (mode === 'read') for (let i = ahead.length - 1; i >= 0 && lastWrite < 0; i--) if (decodeEntry(ahead[i]).mode === 'write') lastWrite = i;
  // Of the writes ahead the rule needs only whether there is one.
  if (mayGo(mode, limit, ahead.length, lastWrite + 1)) return GRANT;
  const nearest = ahead[ahead.length - 1];
  if (mode === 'write') return { kind: 'wait', keys: [nearest], orMarked: false };
  if (mode === 'read') return { kind: 'wait', keys: [ahead[lastWrite]], orMarked: false };
  if (ahead.length > limit && decodeEntry(nearest).mode === 'permit') return { kind: 'wait', keys: [nearest], orMarked: true };
  return { kind: 'wait', keys: ahead.slice(-limit), orMarked: false };
}

/** The limit of the oldest permit ahead when it differs from ours (the older entry's limit stands). */
export function conflictingLimit(limit: number, ahead: readonly IKeyValue[]): number | undefined {
  for (const kv of ahead) {
    const value = decodeEntry(kv);
    if (value.mode === 'permit') return value.limit === limit ? undefined : value.limit;
  }
  return undefined;
}

/** A permit asked with another limit than the permits already queued or holding under the name. */
export function limitMismatch(name: string, limit: number, other: number): LockConfigError {
  return new LockConfigError('limit', `the semaphore "${name}" has limit ${other} at etcd (a permit queued or held with it), not ${limit} as asked`);
}

/** A permit's limit must be a positive integer (LockService checks it first; a direct caller may not). */
export function badLimit(request: Pick<AcquireRequest, 'mode' | 'limit' | 'key'>): LockConfigError | undefined {
  const { limit } = request;
  if (request.mode !== 'permit' || (Number.isInteger(limit) && limit! > 0)) return undefined;
  return new LockConfigError('limit', `a semaphore's limit must be a positive integer, got ${String(limit)} for "${request.key}"`);
}
