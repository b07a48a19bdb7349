import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import type { LockService } from '../../../lib';
import { createZooKeeperBackend } from '../../../lib/backends/zookeeper/create-zookeeper-backend';
import type { ZooKeeperBackendOptions } from '../../../lib/backends/zookeeper/zookeeper-options';
import { startZooKeeperServer, type ZooKeeperServer } from '../../../servers/zookeeper-server';
import { lockServiceOver } from '../../support/lock-service-factory';
import { handsOverSecured, refusedWithin } from '../../support/secured-connection';

const SERVER_TIMEOUT_MS = 1_000;
/** A refused call must be reported by serverTimeoutMs; this much more for a loaded machine. */
const MARGIN_MS = 500;

/**
 * Digest authentication, what node-zookeeper-client supports (no TLS, no SASL: see
 * docs/zookeeper.md). ZooKeeper accepts any digest credentials at connect time, a wrong password
 * being just another identity: the refusal comes from the ACL of the first node the lock needs.
 */
describe('ZooKeeper backend with digest authentication and ACLs', () => {
  let zookeeper: ZooKeeperServer;
  const services: LockService[] = [];
  /** `serverTimeoutMs`: the bound under test, or a wide one where only the outcome counts (a cold JVM answers its first session slowly). */
  const open = (credentials: string | undefined, serverTimeoutMs = 10_000) => {
    const options: ZooKeeperBackendOptions = {
      type: 'zookeeper',
      connectionString: zookeeper.connectionString,
      rootPath: '/secured-locks',
      ...(credentials === undefined ? {} : { auth: [{ scheme: 'digest' as const, credentials }], acl: [{ scheme: 'auth' as const, id: '', permissions: 'all' as const }] }),
    };
    const service = lockServiceOver(createZooKeeperBackend(options, { ttlMs: 10_000, serverTimeoutMs }));
    services.push(service);
    return service;
  };
  before(async () => {
    zookeeper = await startZooKeeperServer();
  });
  after(async () => {
    await Promise.all(services.map((service) => service.onApplicationShutdown()));
    await zookeeper?.stop();
  });

  it('takes, queues and hands a lock over between two sessions with the right password', async () => {
    const first = open('app:s3cret');
    const second = open('app:s3cret');
    await handsOverSecured(first, second, 'vault');
  });

  for (const [name, credentials] of [
    ['a wrong password', 'app:wrong'],
    ['no credentials', undefined],
  ] as const) {
    it(`${name}: the first call fails with a LockBackendError that says NO_AUTH, names the server and backend.auth, within serverTimeoutMs`, async () => {
      // The root and the name's parent exist already, created by the right password with an auth-only ACL.
      const owner = open('app:s3cret');
      const held = await owner.acquire('vault', { waitTimeoutMs: 5_000 });
      after(() => held.release());
      const intruder = open(credentials, SERVER_TIMEOUT_MS);
      // Its session up first: the bound below is the refused call's, not a cold connection's.
      await intruder.tryAcquire('warm-up').catch(() => undefined);
      for (const [call, attempt] of [
        ['acquire of a held name', () => intruder.acquire('vault', { waitTimeoutMs: 10_000 })],
        ['try of a new name', () => intruder.tryAcquire('other')],
      ] as const) {
        await refusedWithin(`${name}, ${call}`, attempt, /not authorized \(NO_AUTH\) for \/secured-locks.*backend\.auth/, zookeeper.connectionString, SERVER_TIMEOUT_MS + MARGIN_MS);
      }
      assert.equal(held.isHeld, true);
    });
  }
});
