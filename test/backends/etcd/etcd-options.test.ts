import 'reflect-metadata';
import assert from 'node:assert/strict';
import { createServer, type Server } from 'node:net';
import { after, before, describe, it } from 'node:test';
import { Module } from '@nestjs/common';
import { NestFactory } from '@nestjs/core';
import { Etcd3 } from 'etcd3';
import { DistributedLockModule, LockConfigError, type EtcdBackendOptions } from '../../../lib';
import { createEtcdBackend } from '../../../lib/backends/etcd/etcd.backend';
import { EtcdCluster } from '../../../servers/etcd-server';
import { freePort } from '../../../servers/free-port';

describe('etcd backend options', () => {
  // A port that counts connections: no bad option may cause one.
  let listener: Server;
  let connections = 0;
  let host: string;

  before(async () => {
    const port = await freePort();
    listener = createServer((socket) => {
      connections++;
      socket.destroy();
    });
    await new Promise<void>((resolve) => listener.listen(port, '127.0.0.1', resolve));
    host = `http://127.0.0.1:${port}`;
  });
  after(() => new Promise<void>((resolve) => listener.close(() => resolve())));

  const bad: Array<[string, Record<string, unknown>]> = [
    ['backend.hosts', { hosts: 'localhost' }],
    ['backend.hosts', { hosts: 'ftp://localhost:2379' }],
    ['backend.hosts', { hosts: [] }],
    ['backend.hosts', { hosts: ['http://127.0.0.1:2379', 42] }],
    ['backend.auth', { auth: { username: '', password: 'x' } }],
    ['backend.auth', { auth: { username: 'root' } }],
    ['backend.credentials', { credentials: { rootCertificate: 'not a buffer' } }],
    ['backend.client', { client: {} }],
    ['backend.client', { client: { watch() {}, lease() {}, close() {} }, hosts: 'http://127.0.0.1:2379' }],
    ['backend.sessionTtlMs', { sessionTtlMs: 0 }],
    ['backend.sessionTtlMs', { sessionTtlMs: Number.NaN }],
    ['backend.sessionTtlMs', { sessionTtlMs: '5000' }],
    ['backend.protocol', { protocol: 'lockapi' }],
    ['backend.protocl', { protocl: 'lock-api' }],
    ['backend.ttl', { ttl: 5 }],
  ];

  for (const [option, fields] of bad) {
    it(`rejects ${JSON.stringify(fields)} naming ${option}, before any connection`, async () => {
      const options = { type: 'etcd', hosts: fields.client ? undefined : host, ...fields } as EtcdBackendOptions;
      if (options.hosts === undefined) delete options.hosts;
      assert.throws(() => createEtcdBackend(options), (error: unknown) => error instanceof LockConfigError && error.option === option);
      @Module({ imports: [DistributedLockModule.forRoot({ backend: options })] })
      class BadModule {}
      await assert.rejects(NestFactory.createApplicationContext(BadModule, { logger: false, abortOnError: false }), LockConfigError);
      assert.equal(connections, 0, 'a bad option still opened a connection');
    });
  }

  it('never closes a client the user supplied', async () => {
    const cluster = await EtcdCluster.start(1);
    const client = new Etcd3({ hosts: cluster.hosts });
    try {
      const backend = createEtcdBackend({ type: 'etcd', client });
      const grant = await backend.tryAcquire({ key: 'user-client', owner: 'o1', ttlMs: 5_000 });
      assert.ok(grant);
      await backend.close();
      assert.equal(grant.lost.aborted, true, 'close did not fire the held grant');
      await client.put('still-open').value('yes');
      assert.equal(await client.get('still-open').string(), 'yes');
      // Closing revoked the backend's session: its lock key is gone.
      assert.deepEqual(await client.getAll().prefix('user-client/').keys(), []);
    } finally {
      client.close();
      await cluster.stop();
    }
  });
});
