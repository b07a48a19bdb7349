import { Batch } from '../../queue/batch';
import type { EtcdAcquisition } from './etcd-acquisition';
import type { LockKeys } from './etcd-keys';
import type { EtcdSession } from './etcd-session';

/**
 * A batch of this process's callers (see Batch) behind one etcd key: its entry token is the
 * key's create revision, so the n-th caller's token is `(create revision << 16) + n`.
 */
export class EtcdBatch extends Batch {
  keys?: LockKeys;
  session?: EtcdSession;
  acquisition?: EtcdAcquisition;
}
