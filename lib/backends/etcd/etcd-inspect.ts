import type { Etcd3, IKeyValue, ITxnRequest } from 'etcd3';
import type { LockInspection } from '../lock-backend.interface';
import { batchToken } from '../local-queue/batch';
import type { EtcdCalls } from './etcd-calls';
import { contenderRange } from './etcd-keys';
import { rangeKvs } from './etcd-requests';

/**
 * One read of a lock name's queue: its lowest key (the holder) and, in the same range's count,
 * how many keys there are. The range makes etcd serve it linearizably (see etcd-requests).
 */
function queueTxn(name: string): ITxnRequest {
  const { start, end } = contenderRange(name);
  return {
    compare: [],
    success: [{ request_range: { key: start, range_end: end, sort_target: 'Create', sort_order: 'Ascend', limit: 1, keys_only: true } }],
    failure: [],
  };
}

/** Deletes the holder's key only if it is still the one read (same create revision): never its successor. */
function deleteHolderTxn(holder: IKeyValue): ITxnRequest {
  return {
    compare: [{ key: holder.key, target: 'Create', result: 'Equal', create_revision: holder.create_revision }],
    success: [{ request_delete_range: { key: holder.key } }],
    failure: [],
  };
}

/**
 * Operators' view of a lock name at etcd, read from etcd alone: the key with the lowest create
 * revision holds, every other key under the name is a waiting entry (one per queued batch of a
 * process: etcd cannot see how many callers a batch holds). The holder's owner is its key
 * below the name, `<session lease id, hex>/<entry id>`; its token the one its entry's first
 * turn got, `create revision << 16` (later turns of the same batch are never written to etcd).
 */
export class EtcdInspector {
  constructor(
    private readonly client: Etcd3,
    private readonly calls: EtcdCalls,
  ) {}

  /** One read, plus one LeaseTimeToLive for `expiresInMs` when the lock is held. */
  async inspect(name: string): Promise<LockInspection> {
    const { holder, count } = await this.queue(name, 'inspect a lock');
    if (!holder) return { held: false, waiting: 0 };
    const owner = holder.key.subarray(contenderRange(name).start.length).toString();
    const fencingToken = batchToken(BigInt(holder.create_revision), 0n);
    return { held: true, holder: { owner, fencingToken, expiresInMs: await this.expiresInMs(holder) }, waiting: count - 1 };
  }

  /**
   * Deletes the holder's key, fenced on its create revision: the next key's watcher is woken as
   * by a release, and the holder learns at its next renewal (the key is gone). False when there
   * was no holder, or it let go between the read and the delete.
   */
  async forceRelease(name: string): Promise<boolean> {
    const { holder } = await this.queue(name, 'force the release of a lock');
    if (!holder) return false;
    const response = await this.calls.txn('force the release of a lock', deleteHolderTxn(holder));
    return response.succeeded;
  }

  private async queue(name: string, operation: string): Promise<{ holder?: IKeyValue; count: number }> {
    const response = await this.calls.txn(operation, queueTxn(name));
    const range = response.responses[0]?.response_range;
    return { holder: rangeKvs(response, 0)[0], count: Number(range?.count ?? 0) };
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
