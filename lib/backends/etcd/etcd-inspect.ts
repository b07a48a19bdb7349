import { delayKeyFor } from './etcd-keys';
import type { Etcd3, IKeyValue, ITxnRequest } from 'etcd3';
import type { LockHolder, LockInspection } from '../lock-backend.interface';
import { batchToken } from '../../queue/batch';
import type { EtcdCalls } from './etcd-calls';
import { decide, decodeEntry } from './entry-modes';
import { contenderRange, holderRecordKey } from './etcd-keys';
import { rangeKvs } from './etcd-requests';

/**
 * One read of a lock name's whole queue, oldest first, with the values (each entry's mode). The
 * range makes etcd serve it linearizably (see etcd-requests).
 */
function queueTxn(name: string): ITxnRequest {
  const { start, end } = contenderRange(name);
  return {
    compare: [],
    success: [{ request_range: { key: start, range_end: end, sort_target: 'Create', sort_order: 'Ascend' } }],
    failure: [],
  };
}

/** Deletes a holder's key only if it is still the one read (same create revision): never its successor. */
function deleteHolderTxn(holder: IKeyValue): ITxnRequest {
  return {
    compare: [{ key: holder.key, target: 'Create', result: 'Equal', create_revision: holder.create_revision }],
    // An operator's release, as the holder's own: its lock-delay key (if any) goes too.
    success: [{ request_delete_range: { key: holder.key } }, { request_delete_range: { key: delayKeyFor(holder.key) } }],
    failure: [],
  };
}

/** The entries the grant rule lets go now: each is judged on the entries ahead of it (decide). */
function holdersOf(queue: readonly IKeyValue[]): IKeyValue[] {
  const holders: IKeyValue[] = [];
  for (let i = 0; i < queue.length; i++) {
    const value = decodeEntry(queue[i]);
    if (decide(value.mode, value.limit ?? 0, queue.slice(0, i)).kind === 'grant') holders.push(queue[i]);
  }
  return holders;
}

/**
 * Operators' view of a lock name at etcd, read from etcd alone: every entry the grant rule lets
 * go holds (the lowest key alone for a write; every reader with no write entry ahead; the first
 * `limit` permits), every other key under the name is a waiting entry (a write entry is one
 * queued batch of a process: etcd cannot see how many callers a batch holds). A write holder's
 * owner is its key below the name, `<session lease id, hex>/<entry id>`, and its token the one
 * its entry's first turn got, `create revision << 16` (later turns of the same batch are never
 * written to etcd); a read or permit holder's owner is that of the caller its entry was put for,
 * kept in its value (readers of that process that shared the entry are not named).
 */
export class EtcdInspector {
  constructor(
    private readonly client: Etcd3,
    private readonly calls: EtcdCalls,
    /** Where holder descriptions are kept (holderRecordKey). */
    private readonly keyPrefix: string,
  ) {}

  /** One read, plus one LeaseTimeToLive and one read of its holder description per holder's session. */
  async inspect(name: string): Promise<LockInspection> {
    const queue = await this.queue(name, 'inspect a lock');
    const holding = holdersOf(queue);
    if (holding.length === 0) return { held: false, waiting: 0 };
    const prefixLength = contenderRange(name).start.length;
    const sessions = new Map<string, Promise<[number, string | undefined]>>();
    const holders = await Promise.all(
      holding.map(async (kv): Promise<LockHolder> => {
        if (!sessions.has(kv.lease)) sessions.set(kv.lease, Promise.all([this.expiresInMs(kv), this.description(kv.lease)]));
        const owner = decodeEntry(kv).owner ?? kv.key.subarray(prefixLength).toString();
        const [expiresInMs, description] = await sessions.get(kv.lease)!;
        return { owner, fencingToken: batchToken(BigInt(kv.create_revision), 0n), expiresInMs, ...(description !== undefined ? { description } : {}) };
      }),
    );
    const first = decodeEntry(holding[0]);
    return {
      held: true,
      mode: first.mode,
      ...(first.mode === 'permit' ? { limit: first.limit } : {}),
      holders,
      holder: holders[0],
      waiting: queue.length - holding.length,
    };
  }

  /**
   * Deletes every holder's key, each fenced on its create revision: the entries behind are woken
   * as by releases, and each holder learns at its next renewal (its key is gone). False when
   * there was no holder, or they all let go between the read and the deletes.
   */
  async forceRelease(name: string): Promise<boolean> {
    const holders = holdersOf(await this.queue(name, 'force the release of a lock'));
    const deleted = await Promise.all(holders.map(async (holder) => (await this.calls.txn('force the release of a lock', deleteHolderTxn(holder))).succeeded));
    return deleted.includes(true);
  }

  private async queue(name: string, operation: string): Promise<IKeyValue[]> {
    return rangeKvs(await this.calls.txn(operation, queueTxn(name)), 0);
  }

  /** The holder description its session's process put (EtcdLockBackend.recordHolder); undefined when there is none. */
  private async description(lease: string): Promise<string | undefined> {
    const { kvs } = await this.calls.call('inspect a lock', (options) => this.client.kv.range({ key: holderRecordKey(this.keyPrefix, lease) }, options));
    return kvs.length > 0 ? kvs[0].value.toString() : undefined;
  }

  /**
   * How long the holder's key outlives its process if that process stopped renewing now: its
   * session lease's remaining ttl. etcd reports whole seconds and the lease ends "in under
   * TTL + 1 seconds", so this is that upper bound (never past the granted ttl); 0 once the lease is gone.
   */
  private async expiresInMs(holder: IKeyValue): Promise<number> {
    const lease = await this.calls.call('inspect a lock', (options) => this.client.leaseClient.leaseTimeToLive({ ID: holder.lease }, options));
    const seconds = Number(lease.TTL);
    return seconds < 0 ? 0 : Math.min(seconds + 1, Number(lease.grantedTTL)) * 1000;
  }
}
