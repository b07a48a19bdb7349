import { Batch } from '../../queue/batch';
import type { LockKeys } from './etcd-keys';
import type { EtcdSession } from './etcd-session';

/**
 * A batch of this process's callers (see Batch) behind one etcd key: its entry token is the
 * key's create revision, so the n-th caller's token is `(create revision << 16) + n`.
 */
export class EtcdBatch extends Batch {
  keys?: LockKeys;
  session?: EtcdSession;
  /** The entry's wait at etcd, while it waits: ours (EtcdAcquisition) or the Lock service's. */
  acquisition?: EntryWait;
}

/** A wait for an entry's grant, which the backend can give up. */
export interface EntryWait {
  stop(reason: unknown): void;
}
