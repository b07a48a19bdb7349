import type { IKeyValue, ITxnRequest, ITxnResponse } from 'etcd3';
import type { LockKeys } from './etcd-keys';

/**
 * The transactions of the lock recipe, each one round trip. Revisions travel as decimal strings
 * (etcd's int64), and are compared as bigints here.
 */

const EMPTY = Buffer.alloc(0);

/**
 * A read of the name's lock-delay keys (etcd-keys.ts), last in a transaction's success branch: one
 * there is a holder's whose lease ran out less than its delay ago (a live holder's own is behind
 * its lock key, which comes first anyway). A read in a transaction the entry makes anyway.
 */
export function delayRange(keys: LockKeys) {
  return { request_range: { key: keys.delayStart, range_end: keys.delayEnd, limit: 1, keys_only: true } } as const;
}

/** The delay key read by `delayRange` as the last op of a transaction that succeeded, if any. */
export function delayKeyOf(response: ITxnResponse): IKeyValue | undefined {
  return response.succeeded ? rangeKvs(response, response.responses.length - 1)[0] : undefined;
}

/**
 * Queue up: if our own key does not exist yet, put it with the session lease, and in the same
 * transaction read the two newest keys: ours, and the one just before it, if any. None before
 * ours means we hold the lock; otherwise that key is the one we watch. (A range sorted by create
 * revision makes etcd read the whole prefix, so the transaction has only this one.) A retried
 * transaction that finds our key already there (the first try did commit) reads it back instead.
 */
export function enqueueTxn(keys: LockKeys, leaseId: string): ITxnRequest {
  return {
    compare: [{ key: keys.own, target: 'Create', result: 'Equal', create_revision: 0 }],
    success: [
      { request_put: { key: keys.own, value: EMPTY, lease: leaseId } },
      { request_range: { key: keys.start, range_end: keys.end, sort_target: 'Create', sort_order: 'Descend', limit: 2, keys_only: true } },
      delayRange(keys),
    ],
    failure: [{ request_range: { key: keys.own, keys_only: true } }],
  };
}

/**
 * Try-lock: put our key only if there is no key at all under the lock's prefix, nor a lock-delay
 * key; with `delayLeaseId`, our own delay key goes with it.
 */
export function tryTakeTxn(keys: LockKeys, leaseId: string, delayLeaseId?: string): ITxnRequest {
  const put = { request_put: { key: keys.own, value: EMPTY, lease: leaseId } };
  return {
    compare: [
      { key: keys.start, range_end: keys.end, target: 'Create', result: 'Equal', create_revision: 0 },
      { key: keys.delayStart, range_end: keys.delayEnd, target: 'Create', result: 'Equal', create_revision: 0 },
    ],
    success: keys.delayOwn && delayLeaseId ? [put, { request_put: { key: keys.delayOwn, value: EMPTY, lease: delayLeaseId } }] : [put],
    failure: [],
  };
}

/** A granted entry with a lock-delay puts its delay key, only while its lock key is still the one it was granted. */
export function putDelayTxn(keys: LockKeys, revision: bigint, delayLeaseId: string): ITxnRequest {
  return {
    compare: [{ key: keys.own, target: 'Create', result: 'Equal', create_revision: revision.toString() }],
    success: [{ request_put: { key: keys.delayOwn!, value: EMPTY, lease: delayLeaseId } }],
    failure: [],
  };
}

/**
 * After a wake-up: is our key still there (same create revision), and which key, if any, is
 * now just before it? None means we hold the lock. A read-only transaction: no raft write.
 */
export function recheckTxn(keys: LockKeys, revision: bigint): ITxnRequest {
  return {
    compare: [{ key: keys.own, target: 'Create', result: 'Equal', create_revision: revision.toString() }],
    success: [
      {
        request_range: {
          key: keys.start,
          range_end: keys.end,
          max_create_revision: (revision - 1n).toString(),
          sort_target: 'Create',
          sort_order: 'Descend',
          limit: 1,
          keys_only: true,
        },
      },
      delayRange(keys),
    ],
    failure: [],
  };
}

/**
 * After etcd's Lock service answered: our key as it is now (lease and create revision) and the
 * lowest key under the name. A 3.4 server answers even when our key was deleted during its wait
 * (etcd-io/etcd#11456), and its header revision is not the key's create revision: this read
 * tells both. Its ranges make etcd serve it linearizably (see linearizable).
 */
export function heldCheckTxn(keys: LockKeys): ITxnRequest {
  return {
    compare: [],
    success: [
      { request_range: { key: keys.own, keys_only: true } },
      { request_range: { key: keys.start, range_end: keys.end, sort_target: 'Create', sort_order: 'Ascend', limit: 1, keys_only: true } },
    ],
    failure: [],
  };
}

/** What a heldCheckTxn read: our key's create revision when it is ours (our lease) and the lowest; else why not. */
export function heldRevision(response: ITxnResponse, leaseId: string): bigint | 'gone' | 'not ours' | 'not first' {
  const own = rangeKvs(response, 0)[0];
  if (!own) return 'gone';
  if (own.lease !== leaseId) return 'not ours';
  return rangeKvs(response, 1)[0]?.create_revision === own.create_revision ? createRevision(own) : 'not first';
}

/**
 * Release or leave the queue: delete our key only if it is still the one we created, so a
 * retried or late delete never removes a newer key (etcd issue 22082), and read who holds the
 * lock now (the lowest key left), whether the delete happened or the key was already gone (a
 * retry whose first try committed): when that is a waiter of this process, it is granted at
 * once, and a hand-over inside this process is confirmed.
 * With no revision (the enqueue failed in flight and we never learnt it) the key is deleted as
 * is: its name holds this acquisition's unique owner id, so no other acquisition can own it.
 */
export function deleteOwnTxn(keys: LockKeys, revision: bigint | undefined): ITxnRequest {
  const lowest = { request_range: { key: keys.start, range_end: keys.end, sort_target: 'Create', sort_order: 'Ascend', limit: 1, keys_only: true } } as const;
  return {
    compare: revision === undefined ? [] : [{ key: keys.own, target: 'Create', result: 'Equal', create_revision: revision.toString() }],
    // A release ends the holder's lock-delay too: its delay key goes in the same transaction.
    success: keys.delayOwn ? [{ request_delete_range: { key: keys.own } }, lowest, { request_delete_range: { key: keys.delayOwn } }] : [{ request_delete_range: { key: keys.own } }, lowest],
    failure: [lowest],
  };
}

/** The lowest key under the name, read by a deleteOwnTxn, if any is left. */
export function lowestAfterDelete(response: ITxnResponse): IKeyValue | undefined {
  return rangeKvs(response, response.succeeded ? 1 : 0)[0];
}

/**
 * A read of `key` that etcd must serve linearizably. etcd serves a read-only transaction without
 * any range as a serializable read (from the member's local state, with no quorum): a
 * compare-only check would then answer "still there" from a member cut off from the cluster.
 */
function linearizable(key: Buffer) {
  return { request_range: { key, count_only: true } };
}

/**
 * Are these keys all unchanged (same mod revision: not deleted, not rewritten as a granted
 * permit)? A read-only transaction, for the keys a waiter watches.
 */
export function keysStillTxn(kvs: readonly IKeyValue[]): ITxnRequest {
  return {
    compare: kvs.map((kv) => ({ key: kv.key, target: 'Mod', result: 'Equal', mod_revision: kv.mod_revision }) as const),
    success: [linearizable(kvs[0].key)],
    failure: [],
  };
}

/** A held lock's key, and the create revision it was granted with. */
export interface OwnKey {
  readonly key: Buffer;
  readonly revision: bigint;
}

/**
 * Renewal check of many held locks in one read-only transaction: every key still with the create
 * revision it was granted? If not, the failure branch reads each key (keys_only still returns its
 * create revision), so one round trip tells which are gone (ownKeysStill). Those ranges also make
 * etcd serve it linearizably (see linearizable): etcd decides that from the ops of both branches,
 * not from the branch that runs.
 */
export function ownKeysTxn(owned: readonly OwnKey[]): ITxnRequest {
  return {
    compare: owned.map(({ key, revision }) => ({ key, target: 'Create', result: 'Equal', create_revision: revision.toString() }) as const),
    success: [],
    failure: owned.map(({ key }) => ({ request_range: { key, keys_only: true } })),
  };
}

/** Per key of an ownKeysTxn, in order: still there with the create revision it was granted. */
export function ownKeysStill(response: ITxnResponse, owned: readonly OwnKey[]): boolean[] {
  if (response.succeeded) return owned.map(() => true);
  return owned.map(({ revision }, i) => rangeKvs(response, i).some((kv) => createRevision(kv) === revision));
}

export function rangeKvs(response: ITxnResponse, index: number): IKeyValue[] {
  return response.responses[index]?.response_range?.kvs ?? [];
}

export const createRevision = (kv: IKeyValue) => BigInt(kv.create_revision);
