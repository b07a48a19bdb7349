import type { ITxnRequest, ITxnResponse } from 'etcd3';
import { SameTickBatchesPer } from '../same-tick-batches';
import { ownKeysStill, ownKeysTxn, type OwnKey } from './etcd-requests';
import type { EtcdSession } from './etcd-session';

/** etcd refuses a transaction of more compares, or more ops in a branch (--max-txn-ops, default 128). */
const RENEWALS_PER_TXN = 128;

/**
 * The renewal checks of held locks: those due in one tick go to etcd as one read-only transaction
 * per 128 (ownKeysTxn), so 10,000 held locks cost about 80 transactions per renewal interval, not
 * 10,000. Checks of different sessions never share one: each session has its own batches, which
 * go with it.
 */
export class EtcdRenewals {
  private readonly batches = new SameTickBatchesPer<EtcdSession, OwnKey, boolean>(RENEWALS_PER_TXN, (session, owned) => this.check(session, owned));

  constructor(
    /** The backend's bounded call, which ends the session when etcd says its lease is gone. */
    private readonly txn: (session: EtcdSession, operation: string, request: ITxnRequest) => Promise<ITxnResponse>,
  ) {}

  /** Whether the key is still there with the create revision it was granted; a failed call rejects. */
  stillOurs(session: EtcdSession, owned: OwnKey): Promise<boolean> {
    return this.batches.add(session, owned);
  }

  private async check(session: EtcdSession, owned: OwnKey[]): Promise<boolean[]> {
    const operation = owned.length === 1 ? 'renew a lock' : `renew ${owned.length} locks`;
    return ownKeysStill(await this.txn(session, operation, ownKeysTxn(owned)), owned);
  }
}
