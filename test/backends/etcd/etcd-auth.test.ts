import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { Etcd3, Range } from 'etcd3';
import { DEFAULT_KEY_PREFIX, type EtcdProtocol } from '../../../lib';
import { createEtcdBackend, type EtcdLockBackend } from '../../../lib/backends/etcd/etcd.backend';
import { createEtcdLockApiBackend } from '../../../lib/backends/etcd/lock-api/etcd-lock-api.backend';
import { EtcdCluster } from '../../../servers/etcd-server';

const never = new AbortController().signal;
const request = (key: string, owner: string) => ({ key, owner, ttlMs: 10_000, signal: never });

/**
 * etcd with authentication on, and a user whose role may only read and write the module's key
 * prefix, as docs/etcd.md tells RBAC users to set up: the backend passes `auth` to etcd3, and its
 * session lease, transactions and watches all work within that role.
 */
describe('etcd backend with authentication (RBAC)', () => {
  let cluster: EtcdCluster;
  const backends: EtcdLockBackend[] = [];
  const open = (auth: { username: string; password: string }, protocol: EtcdProtocol = 'native') => {
    const backend = protocol === 'lock-api' ? createEtcdLockApiBackend({ type: 'etcd', hosts: cluster.hosts, auth, protocol }) : createEtcdBackend({ type: 'etcd', hosts: cluster.hosts, auth });
    backends.push(backend);
    return backend;
  };

  before(async () => {
    cluster = await EtcdCluster.start(1);
    const admin = new Etcd3({ hosts: cluster.hosts });
    try {
      await admin.role('root').create();
      await admin.user('root').create('root-secret');
      await admin.user('root').addRole('root');
      const locks = await admin.role('locks').create();
      await locks.grant({ permission: 'Readwrite', range: Range.prefix(DEFAULT_KEY_PREFIX) });
      await admin.user('locks').create('locks-secret');
      await admin.user('locks').addRole('locks');
      await admin.auth.authEnable();
    } finally {
      admin.close();
    }
  });
  after(async () => {
    await Promise.all(backends.map((backend) => backend.close()));
    await cluster.stop();
  });

  for (const protocol of ['native', 'lock-api'] as const) {
    it(`locks, queues and hands off as a user limited to the key prefix (protocol '${protocol}')`, async () => {
      const first = open({ username: 'locks', password: 'locks-secret' }, protocol);
      const second = open({ username: 'locks', password: 'locks-secret' }, protocol);
      const key = `${DEFAULT_KEY_PREFIX}auth-${protocol}`;
      const held = await first.acquire(request(key, 'first'));
      const waiting = second.acquire(request(key, 'second'));
      await new Promise((resolve) => setTimeout(resolve, 100));
      await first.release(held);
      const handedOn = await waiting;
      assert.ok(handedOn.fencingToken > held.fencingToken);
      assert.equal(await second.renew(handedOn), true);
      await second.release(handedOn);
    });
  }

  it("answers the health check's ping as a user limited to the key prefix, and refuses it with a wrong password", async () => {
    await open({ username: 'locks', password: 'locks-secret' }).ping();
    await assert.rejects(open({ username: 'locks', password: 'wrong' }).ping(), /authentication failed|invalid/i);
  });

  it('is refused outside the role, and with a wrong password', async () => {
    const outside = open({ username: 'locks', password: 'locks-secret' });
    await assert.rejects(outside.acquire(request('elsewhere:auth', 'o')), /permission denied/i);
    const wrong = open({ username: 'locks', password: 'wrong' });
    await assert.rejects(wrong.acquire(request(`${DEFAULT_KEY_PREFIX}auth`, 'o')), /authentication failed|invalid/i);
  });
});
