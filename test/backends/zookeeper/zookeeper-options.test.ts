import assert from 'node:assert/strict';
import { createHash } from 'node:crypto';
import { createServer, type Server } from 'node:net';
import { after, before, describe, it } from 'node:test';
import { LockBackendError, LockConfigError } from '../../../lib';
import { createBackend } from '../../../lib/backends/registry';
import { createZooKeeperBackend } from '../../../lib/backends/zookeeper/create-zookeeper-backend';
import { resolveZooKeeperOptions, type ZooKeeperBackendOptions } from '../../../lib/backends/zookeeper/zookeeper-options';
import { resolveModuleOptions } from '../../../lib/lock-options';
import { lockServiceOver } from '../../support/lock-service-factory';
import { startZooKeeperServer, type ZooKeeperServer } from '../../../servers/zookeeper-server';
import { ZooKeeperInspector } from './zookeeper-inspect';

describe('ZooKeeper options', () => {
  let sentinel: Server;
  let sentinelPort: number;
  let connections = 0;
  before(async () => {
    // A listener that counts connections: a bad option must be refused before any I/O.
    sentinel = createServer((socket) => {
      connections++;
      socket.destroy();
    });
    await new Promise<void>((resolve) => sentinel.listen(0, '127.0.0.1', resolve));
    sentinelPort = (sentinel.address() as { port: number }).port;
  });
  after(() => new Promise<void>((resolve) => sentinel.close(() => resolve())));

  it('rejects bad options with LockConfigError naming the option, before any connection', async () => {
    const good = { type: 'zookeeper', connectionString: `127.0.0.1:${sentinelPort}` } as const;
    const bad: [string, Partial<Record<keyof ZooKeeperBackendOptions, unknown>>][] = [
      ['backend.connectionString', { connectionString: undefined }],
      ['backend.connectionString', { connectionString: '' }],
      ['backend.connectionString', { connectionString: '/chroot' }],
      ['backend.connectionString', { connectionString: '127.0.0.1:99999' }],
      ['backend.connectionString', { connectionString: 'host:' }],
      ['backend.connectionString', { connectionString: 'zk://127.0.0.1:2181' }],
      ['backend.connectionString', { connectionString: '127.0.0.1:2181/chroot/' }],
      ['backend.connectionString', { connectionString: 42 }],
      // node-zookeeper-client splits at every ':': it would only fail after the connect timeout.
      ['backend.connectionString', { connectionString: '[::1]:2181' }],
      ['backend.connectionString', { connectionString: '127.0.0.1:2181,[::1]:2181/locks' }],
      ['backend.sessionTimeoutMs', { sessionTimeoutMs: 0 }],
      ['backend.sessionTimeoutMs', { sessionTimeoutMs: -1 }],
      ['backend.sessionTimeoutMs', { sessionTimeoutMs: 1.5e3 + 0.5 }],
      ['backend.sessionTimeoutMs', { sessionTimeoutMs: Number.NaN }],
      ['backend.sessionTimeoutMs', { sessionTimeoutMs: '10000' }],
      ['backend.auth', { auth: [{ scheme: 'sasl', credentials: 'u:p' }] }],
      ['backend.auth', { auth: [{ scheme: 'digest', credentials: 'no-colon' }] }],
      ['backend.auth', { auth: 'user:password' }],
      ['backend.acl', { acl: [] }],
      ['backend.acl', { acl: [{ scheme: 'world', id: 'anyone', permissions: ['fly'] }] }],
      ['backend.acl', { acl: [{ scheme: 'kerberos', id: 'x', permissions: 'all' }] }],
      ['backend.acl', { acl: [{ scheme: 'auth', id: '', permissions: 'all' }] }],
      ['backend.rootPath', { rootPath: '/' }],
      ['backend.rootPath', { rootPath: 'locks' }],
      ['backend.rootPath', { rootPath: '/locks/' }],
      ['backend.rootPath', { rootPath: '/a//b' }],
      ['backend.rootPath', { rootPath: '/a/../b' }],
      ['backend.rootPath', { rootPath: '/a/./b' }],
      ['backend.rootPath', { rootPath: '/zookeeper' }],
      ['backend.rootPath', { rootPath: '/zookeeper/locks' }],
      ['backend.rootPath', { rootPath: '/a\u0000b' }],
      ['backend.rootPath', { rootPath: '/\u{1F512}' }],
      ['backend.rootPath', { rootPath: 7 }],
      ['backend.sessionTimeout', { sessionTimeout: 5_000 } as never],
      ['backend.protocol', { protocol: 'Curator' as never }],
      ['backend.curatorRecipe', { protocol: 'curator', curatorRecipe: 'InterProcessSemaphoreV2' as never }],
      ['backend.curatorRecipe', { curatorRecipe: 'InterProcessMutex' }],
      ['backend.protocl', { protocl: 'curator' } as never],
    ];
    for (const [option, change] of bad) {
      const options = { ...good, ...change } as ZooKeeperBackendOptions;
      assert.throws(() => createZooKeeperBackend(options), (error: unknown) => {
        assert.ok(error instanceof LockConfigError, `${JSON.stringify(change)}: ${String(error)}`);
        assert.equal(error.option, option, JSON.stringify(change));
        return true;
      });
      await assert.rejects(createBackend(options), LockConfigError);
    }
    assert.throws(
      () => createZooKeeperBackend({ ...good, connectionString: '[::1]:2181' }),
      /cannot connect to an IPv6 literal .*use a host name that resolves to the address/,
    );
    assert.throws(() => createZooKeeperBackend({ ...good, sessionTimeoutMs: '10000' as never }), /must be a number, got the string "10000"/);
    assert.throws(() => createZooKeeperBackend({ ...good, sessionTimeout: 5_000 } as never), /"backend.sessionTimeout".*did you mean "backend.sessionTimeoutMs"/);
    assert.throws(() => createZooKeeperBackend({ ...good, protocl: 'curator' } as never), /"backend.protocl".*did you mean "backend.protocol"/);
    assert.throws(() => createZooKeeperBackend({ ...good, curatorRecipe: 'InterProcessMutex' }), /applies to protocol 'curator' only/);
    await new Promise((resolve) => setTimeout(resolve, 100));
    assert.equal(connections, 0, 'a backend with bad options connected to the server');
    assert.equal(resolveModuleOptions({ backend: good }).backend, good);
  });

  it('accepts connection strings as node-zookeeper-client does, and names the servers (never the chroot) as its address', () => {
    const accepted: [string, string][] = [
      ['127.0.0.1:2181', '127.0.0.1:2181'],
      // The client's default port.
      ['127.0.0.1', '127.0.0.1:2181'],
      ['zk1:2181,zk2,zk3:2182/app/locks', 'zk1:2181,zk2:2181,zk3:2182'],
      // Empty entries are skipped; a '/' alone at the end is no chroot.
      ['zk1:2181,,zk2:2181/', 'zk1:2181,zk2:2181'],
      // A bracket in the chroot is a valid node name, not an address.
      ['127.0.0.1:2181/locks[eu]', '127.0.0.1:2181'],
    ];
    for (const [connectionString, address] of accepted) {
      assert.equal(resolveZooKeeperOptions({ type: 'zookeeper', connectionString }).address, address, connectionString);
    }
  });

  describe('digest auth and ACLs, on a server', () => {
    let zookeeper: ZooKeeperServer;
    before(async () => {
      zookeeper = await startZooKeeperServer();
    });
    after(async () => {
      await zookeeper?.stop();
    });

    it('creates nodes only its credentials may touch; other identities cannot take or break the lock', async () => {
      const digest = (credentials: string) => `${credentials.split(':')[0]}:${createHash('sha1').update(credentials).digest('base64')}`;
      const options: ZooKeeperBackendOptions = {
        type: 'zookeeper',
        connectionString: zookeeper.connectionString,
        rootPath: '/secure-locks',
        auth: [{ scheme: 'digest', credentials: 'app:s3cret' }],
        acl: [
          { scheme: 'auth', id: '', permissions: 'all' },
          { scheme: 'digest', id: digest('ops:watch'), permissions: ['read'] },
        ],
      };
      const owner = lockServiceOver(createZooKeeperBackend(options));
      const sameCredentials = lockServiceOver(createZooKeeperBackend(options));
      const stranger = lockServiceOver(createZooKeeperBackend({ type: 'zookeeper', connectionString: zookeeper.connectionString, rootPath: '/secure-locks' }));
      const anonymous = await ZooKeeperInspector.connect(zookeeper.connectionString);
      const ops = await ZooKeeperInspector.connect(zookeeper.connectionString, 'ops:watch');
      try {
        const lock = await owner.acquire('vault');
        assert.equal(await sameCredentials.tryAcquire('vault'), null);
        await assert.rejects(stranger.tryAcquire('vault'), (error: unknown) => error instanceof LockBackendError && /NO_AUTH|NoAuth|-102/i.test(String(error.message)));
        const [parent] = await ops.children('/secure-locks');
        const [node] = await ops.children(`/secure-locks/${parent}`);
        await assert.rejects(anonymous.remove(`/secure-locks/${parent}/${node}`), /NO_AUTH/);
        await assert.rejects(ops.remove(`/secure-locks/${parent}/${node}`), /NO_AUTH/);
        assert.equal(lock.isHeld, true);
        await lock.release();
        const next = await sameCredentials.tryAcquire('vault');
        assert.ok(next);
        await next.release();
      } finally {
        anonymous.close();
        ops.close();
        await Promise.all([owner, sameCredentials, stranger].map((service) => service.onApplicationShutdown()));
      }
    });
  });
});
