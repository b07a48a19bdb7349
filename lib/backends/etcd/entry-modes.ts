import type { IKeyValue } from 'etcd3';
import type { EntryMode } from '../lock-backend.interface';

/**
 * What an entry under a lock name asks for, read from its value. A write entry's value is empty,
 * as the keys of etcd's concurrency.Mutex (and `etcdctl lock`) are: a key of theirs under the
 * name is a write entry to us, and any key of ours ahead of theirs makes them wait, whatever it is.
 */
export interface EntryValue {
  readonly mode: EntryMode;
  /** For a permit: its semaphore's limit. */
  readonly limit?: number;
  /** The caller's owner id (write entries name none: a batch serves many owners). */
  readonly owner?: string;
  /** A permit that waited marks itself granted, which wakes the permit watching it (see decide). */
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
  /** Wait for this key to be deleted (`orMarked`: or marked granted). */
  | { readonly kind: 'key'; readonly key: IKeyValue; readonly orMarked: boolean }
  /** Wait for any deletion under the name: one of several entries ahead may free the place. */
  | { readonly kind: 'any-delete' };

/**
 * The grant rule over `ahead` (every entry created before ours, oldest first), and what to wait
 * on otherwise, so that only a change that can grant us (or move us forward) wakes us:
 * - read: granted with no write entry ahead; else it waits for the nearest write entry ahead.
 * - permit: granted with fewer than `limit` entries ahead. With exactly `limit` ahead (the first
 *   waiting permit), any one deletion ahead grants it, so it watches the name's deletions. With
 *   more, the permit just ahead of it waits too, and it waits for that one to be deleted or marked
 *   granted, after which it is the first waiting permit: releases wake one waiter, not all.
 */
export function decide(mode: 'read' | 'permit', limit: number, ahead: readonly IKeyValue[]): Decision {
  if (mode === 'read') {
    for (let i = ahead.length - 1; i >= 0; i--) if (decodeEntry(ahead[i]).mode === 'write') return { kind: 'key', key: ahead[i], orMarked: false };
    return { kind: 'grant' };
  }
  if (ahead.length < limit) return { kind: 'grant' };
  const nearest = ahead[ahead.length - 1];
  if (ahead.length > limit && decodeEntry(nearest).mode === 'permit') return { kind: 'key', key: nearest, orMarked: true };
  return { kind: 'any-delete' };
}

/** The limit of the oldest permit ahead when it differs from ours (the older entry's limit stands). */
export function conflictingLimit(limit: number, ahead: readonly IKeyValue[]): number | undefined {
  for (const kv of ahead) {
    const value = decodeEntry(kv);
    if (value.mode === 'permit') return value.limit === limit ? undefined : value.limit;
  }
  return undefined;
}
