import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import type { BackendOptions } from '../../../lib';
import { startZooKeeperServer, type ZooKeeperServer } from '../../../servers/zookeeper-server';
import { moduleLikeService } from '../../support/lock-service-factory';
import { eventually } from '../../support/timing';
import { holderDescriptionCases } from '../holder-description-cases';
import { ZooKeeperInspector } from './zookeeper-inspect';

const ROOT = '/described-locks';

/**
 * inspect() names the holder's machine and process: each session keeps its process's
 * holderDescription in one ephemeral node under the root; no lock call writes it.
 */
describe('zookeeper backend: the holder description', () => {
  let zookeeper: ZooKeeperServer;
  let inspector: ZooKeeperInspector;
  const backend = (): BackendOptions => ({ type: 'zookeeper', connectionString: zookeeper.connectionString, rootPath: ROOT });
  const recordNodes = async () => (await inspector.children(ROOT)).filter((child) => child.startsWith('holder.'));

  before(async () => {
    zookeeper = await startZooKeeperServer();
    inspector = await ZooKeeperInspector.connect(zookeeper.connectionString);
  });
  after(async () => {
    inspector?.close();
    await zookeeper?.stop();
  });

  holderDescriptionCases(
    () => ({
      backend: backend(),
      // Ephemeral: kept for as long as the session, no expiry of its own.
      records: async () => {
        const texts = await Promise.all((await recordNodes()).map((node) => inspector.text(`${ROOT}/${node}`)));
        return texts.filter((text) => text !== undefined).map((description) => ({ description, expiresInMs: Infinity }));
      },
    }),
    { readLocks: true, recordsPerProcess: false },
  );

  it('one node per session, not per lock, and gone with the session', async () => {
    const podB = (await moduleLikeService({ backend: backend(), holderDescription: 'orders-pod-b' })).service;
    await (await podB.acquire('warm-up')).release();
    // Only podB's nodes are compared: a session of an earlier test may still be ending meanwhile
    // (a close waits at most 1 s for the server; a SIGKILLed child's lasts its session timeout).
    const podBNodes = async () => {
      const nodes = await recordNodes();
      const texts = await Promise.all(nodes.map((node) => inspector.text(`${ROOT}/${node}`)));
      return nodes.filter((_, i) => texts[i] === 'orders-pod-b');
    };
    const before = new Set(await recordNodes());
    assert.equal((await podBNodes()).length, 1, "podB's record after its first lock");
    for (let i = 0; i < 20; i++) await (await podB.acquire(`many-${i}`)).release();
    const added = (await recordNodes()).filter((node) => !before.has(node));
    assert.deepEqual(added, [], 'a lock call added a record');
    await podB.onApplicationShutdown();
    // A close waits at most 1 s for the server's answer (a slow disk can take longer to commit it).
    await eventually(async () => (await podBNodes()).length === 0, 5_000, "podB's record to go with its session", 20);
  });
});
