import assert from 'node:assert/strict';
import { hostname } from 'node:os';
import { after, before, describe, it } from 'node:test';
import type { LockService } from '../../../lib';
import { startZooKeeperServer, type ZooKeeperServer } from '../../../servers/zookeeper-server';
import { HolderProcess } from '../../support/holder-process';
import { moduleLikeService } from '../../support/lock-service-factory';
import { ZooKeeperInspector } from './zookeeper-inspect';

const ROOT = '/described-locks';

/**
 * inspect() names the holder's machine and process: each session keeps its process's
 * holderDescription in one ephemeral node under the root; no lock call writes it.
 */
describe('zookeeper backend: the holder description in inspect()', () => {
  let zookeeper: ZooKeeperServer;
  let inspector: ZooKeeperInspector;
  const services: LockService[] = [];
  const backend = () => ({ type: 'zookeeper' as const, connectionString: zookeeper.connectionString, rootPath: ROOT });
  const service = async (options: { holderDescription?: string } = {}) => {
    const made = (await moduleLikeService({ backend: backend(), ttlMs: 2_000, ...options })).service;
    services.push(made);
    return made;
  };
  const records = async () => (await inspector.children(ROOT)).filter((child) => child.startsWith('holder.'));

  before(async () => {
    zookeeper = await startZooKeeperServer();
    inspector = await ZooKeeperInspector.connect(zookeeper.connectionString);
  });
  after(async () => {
    await Promise.all(services.map((each) => each.onApplicationShutdown()));
    inspector?.close();
    await zookeeper?.stop();
  });

  it("another process's lock: its host name and pid by default", async () => {
    const holder = await HolderProcess.withModule({ backend: backend(), ttlMs: 2_000 });
    try {
      await holder.acquire('described-by-default');
      const seen = await (await service()).inspect('described-by-default');
      assert.equal(seen.holder?.description, `${hostname()} pid ${holder.pid}`);
    } finally {
      await holder.stop();
    }
  });

  it('the module option holderDescription, as another process sees it', async () => {
    const podA = await service({ holderDescription: 'orders-7f9c-pod-a' });
    const handle = await podA.acquire('described');
    try {
      assert.equal((await (await service()).inspect('described')).holder?.description, 'orders-7f9c-pod-a');
    } finally {
      await handle.release();
    }
  });

  it('one node per session, not per lock, and gone with the session', async () => {
    const podB = await service({ holderDescription: 'orders-pod-b' });
    await (await podB.acquire('warm-up')).release();
    const before = await records();
    for (let i = 0; i < 20; i++) await (await podB.acquire(`many-${i}`)).release();
    assert.deepEqual(await records(), before, 'a lock call added a record');
    await podB.onApplicationShutdown();
    services.splice(services.indexOf(podB), 1);
    assert.equal((await records()).length, before.length - 1, 'the record outlived its session');
  });
});
