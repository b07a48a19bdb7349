import { after, before, describe } from 'node:test';
import { sessionTtlSeconds } from '../../../lib/backends/etcd/etcd-options';
import { EtcdCluster } from '../../../servers/etcd-server';
import { inspectCases, TTL_MS } from '../inspect-cases';

/**
 * The inspector on etcd: the holder learns of a forceRelease at its next renewal (a third of the
 * ttl), which reads its key; expiresInMs is its session lease's remaining ttl, in whole seconds.
 */
describe('etcd backend: inspect and forceRelease', () => {
  let cluster: EtcdCluster | undefined;
  before(async () => {
    cluster = await EtcdCluster.start(1);
  });
  after(async () => {
    await cluster?.stop();
  });

  inspectCases(() => ({
    backend: { type: 'etcd', hosts: cluster!.hosts },
    owner: /^[0-9a-f]+\/\S+$/,
    expiresAtMostMs: sessionTtlSeconds(TTL_MS) * 1000,
    // The next renewal, plus its round trip and the load of a shared 2-core machine.
    lostBoundMs: TTL_MS / 3 + 1_000,
  }));
});
