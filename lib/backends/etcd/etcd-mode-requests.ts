import type { IKeyValue, ITxnRequest, ITxnResponse } from 'etcd3';
import { encodeEntry, type EntryValue } from './entry-modes';
import type { LockKeys } from './etcd-keys';
import type { EntryMode } from '../lock-backend.interface';
import { createRevision, delayRange, enqueueTxn, rangeKvs, recheckTxn } from './etcd-requests';

/**
 * The transactions of read and permit entries, each one round trip, and which one an entry of
 * each mode makes. Unlike a write entry, which needs only the key just before its own, these read
 * every entry ahead with its value: the grant rule depends on the modes (and the count) of all of them.
 */

/** Every entry under the name with its value, oldest first; `below`: only those created before it. */
function entries(keys: LockKeys, below?: bigint) {
  return {
    request_range: {
      key: keys.start,
      range_end: keys.end,
      sort_target: 'Create',
      sort_order: 'Ascend',
      ...(below === undefined ? {} : { max_create_revision: (below - 1n).toString() }),
    },
  } as const;
}

/**
 * Queue up: if our key does not exist yet, put it with `value` and the session lease, and read
 * every entry under the name (ours is the newest: those before it are ahead). A retried
 * transaction whose first try committed reads our key back instead.
 */
function modeEnqueueTxn(keys: LockKeys, leaseId: string, value: Buffer): ITxnRequest {
  return {
    compare: [{ key: keys.own, target: 'Create', result: 'Equal', create_revision: 0 }],
    success: [{ request_put: { key: keys.own, value, lease: leaseId } }, entries(keys), delayRange(keys)],
    failure: [{ request_range: { key: keys.own, keys_only: true } }],
  };
}

/** After a wake-up: is our key still there, and which entries are ahead of it now? Read-only. */
function modeRecheckTxn(keys: LockKeys, revision: bigint): ITxnRequest {
  return {
    compare: [{ key: keys.own, target: 'Create', result: 'Equal', create_revision: revision.toString() }],
    success: [entries(keys, revision), delayRange(keys)],
    failure: [],
  };
}

/** The put of an entry and the read of what is ahead of it: a write's reads only the key just before its own (enqueueTxn). */
export function entryEnqueueTxn(keys: LockKeys, leaseId: string, entry: EntryValue): ITxnRequest {
  return entry.mode === 'write' ? enqueueTxn(keys, leaseId) : modeEnqueueTxn(keys, leaseId, encodeEntry(entry));
}

/** A look at the queue from our entry: it fails when our key is gone; else it reads what `entryEnqueueTxn` read ahead. */
export function entryRecheckTxn(mode: EntryMode, keys: LockKeys, revision: bigint): ITxnRequest {
  return mode === 'write' ? recheckTxn(keys, revision) : modeRecheckTxn(keys, revision);
}

/** The entries ahead of ours (created before `revision`) that the answer's `index`-th range read, oldest first. */
export function entriesAhead(response: ITxnResponse, index: number, revision: bigint): IKeyValue[] {
  // A write's ranges read newest first, but keep at most one key ahead: oldest first all the same.
  return rangeKvs(response, index).filter((kv) => createRevision(kv) < revision);
}

/**
 * A permit granted after waiting rewrites its value as granted (same key, same lease, same create
 * revision), only if the key is still its own: the put event wakes the permit behind it.
 */
export function markGrantedTxn(keys: LockKeys, revision: bigint, leaseId: string, entry: EntryValue): ITxnRequest {
  return {
    compare: [{ key: keys.own, target: 'Create', result: 'Equal', create_revision: revision.toString() }],
    success: [{ request_put: { key: keys.own, value: encodeEntry({ ...entry, granted: true }), lease: leaseId } }],
    failure: [],
  };
}
