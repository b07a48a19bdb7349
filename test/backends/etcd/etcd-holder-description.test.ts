import assert from 'node:assert/strict';
import { hostname } from 'node:os';
import { after, before, describe, it } from 'node:test';
import { Etcd3 } from 'etcd3';
import type { LockService } from '../../../lib';
import { EtcdCluster } from '../../../servers/etcd-server';
import { HolderProcess } from '../../support/holder-process';
import { moduleLikeService } from '../../support/lock-service-factory';

/**
 * inspect() names the holder's machine and process: each process puts its holderDescription
 * once per session, with the session's lease, beside the locks; no lock call writes it.
 */
describe('etcd backend: the holder description in inspect()', () => {
  let cluster: EtcdCluster;
  let raw: Etcd3;
  const services: LockService[] = [];
  const service = async (options: { holderDescription?: string } = {}) => {
    const made = (await moduleLikeService({ backend: { type: 'etcd', hosts: cluster.hosts }, ...options })).service;
    services.push(made);
    return made;
  };
  const records = async () => (await raw.getAll().prefix('lock:.holder.').strings()) as Record<string, string>;

  before(async () => {
    cluster = await EtcdCluster.start(1);
    raw = new Etcd3({ hosts: cluster.hosts });
  });
  after(async () => {
    await Promise.all(services.map((each) => each.onApplicationShutdown()));
    raw?.close();
    await cluster?.stop();
  });

  it("another process's lock: its host name and pid by default, in the JSON form too", async () => {
    const holder = await HolderProcess.withModule({ backend: { type: 'etcd', hosts: cluster.hosts } });
    try {
      await holder.acquire('described-by-default');
      const seen = await (await service()).inspect('described-by-default');
      assert.equal(seen.holder?.description, `${hostname()} pid ${holder.pid}`);
      assert.equal((JSON.parse(JSON.stringify(seen)) as { holder: { description: string } }).holder.description, `${hostname()} pid ${holder.pid}`);
    } finally {
      await holder.stop();
    }
  });

  it('the module option holderDescription, as another process sees it', async () => {
    const podA = await service({ holderDescription: 'orders-7f9c-pod-a' });
    const handle = await podA.acquire('described');
    try {
      const seen = await (await service()).inspect('described');
      assert.equal(seen.holder?.description, 'orders-7f9c-pod-a');
    } finally {
      await handle.release();
    }
  });

  it('written once per session, never per lock, and gone with the session', async () => {
    const podB = await service({ holderDescription: 'orders-pod-b' });
    await (await podB.acquire('warm-up')).release();
    const puts = async () => (await cluster.messagesReceived(0)).byMethod.Put ?? 0;
    const before = await puts();
    assert.ok(before > 0, 'the session record is the one Put so far');
    for (let i = 0; i < 20; i++) await (await podB.acquire(`many-${i}`)).release();
    assert.equal(await puts(), before, 'a lock call put a record');
    assert.ok(Object.values(await records()).includes('orders-pod-b'), JSON.stringify(await records()));
    await podB.onApplicationShutdown();
    services.splice(services.indexOf(podB), 1);
    assert.ok(!Object.values(await records()).includes('orders-pod-b'), 'the record outlived its session');
  });
});
