import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { Etcd3 } from 'etcd3';
import type { BackendOptions } from '../../../lib';
import { EtcdCluster } from '../../../servers/etcd-server';
import { moduleLikeService } from '../../support/lock-service-factory';
import { holderDescriptionCases } from '../holder-description-cases';

/**
 * inspect() names the holder's machine and process: each process puts its holderDescription
 * once per session, with the session's lease, beside the locks; no lock call writes it.
 */
describe('etcd backend: the holder description', () => {
  let cluster: EtcdCluster;
  let raw: Etcd3;
  const backend = (): BackendOptions => ({ type: 'etcd', hosts: cluster.hosts });
  const records = async () => (await raw.getAll().prefix('lock:.holder.').strings()) as Record<string, string>;

  before(async () => {
    cluster = await EtcdCluster.start(1);
    raw = new Etcd3({ hosts: cluster.hosts });
  });
  after(async () => {
    raw?.close();
    await cluster?.stop();
  });

  holderDescriptionCases(
    () => ({
      backend: backend(),
      // Kept for as long as the session's lease: no expiry of its own.
      records: async () => Object.values(await records()).map((description) => ({ description, expiresInMs: Infinity })),
    }),
    { readLocks: true, recordsPerProcess: false },
  );

  it('written once per session, never per lock, and gone with the session', async () => {
    const podB = (await moduleLikeService({ backend: backend(), holderDescription: 'orders-pod-b' })).service;
    await (await podB.acquire('warm-up')).release();
    const puts = async () => (await cluster.messagesReceived(0)).byMethod.Put ?? 0;
    const before = await puts();
    assert.ok(before > 0, 'the session record is the one Put so far');
    for (let i = 0; i < 20; i++) await (await podB.acquire(`many-${i}`)).release();
    assert.equal(await puts(), before, 'a lock call put a record');
    assert.ok(Object.values(await records()).includes('orders-pod-b'), JSON.stringify(await records()));
    await podB.onApplicationShutdown();
    assert.ok(!Object.values(await records()).includes('orders-pod-b'), 'the record outlived its session');
  });
});
