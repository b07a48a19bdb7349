import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { Redis } from 'ioredis';
import { LockConfigError, type BackendOptions } from '../../../lib';
import { createBackend } from '../../../lib/backends/registry';
import { resolveModuleOptions } from '../../../lib/lock-options';
import { lockServiceOver } from '../../support/lock-service-factory';
import { startRedisServer, type RedisServer } from '../../../servers/redis-server';

describe('redis backend options', () => {
  it('rejects bad options with LockConfigError naming the option, before any connection', async () => {
    // Port 1 on loopback: if any of these tried to connect, it would hang or fail differently.
    const client = new Redis({ port: 1, lazyConnect: true });
    const cases: [unknown, string][] = [
      [{ type: 'redis' }, 'backend.url'],
      [{ type: 'redis', url: 'http://127.0.0.1:6379' }, 'backend.url'],
      [{ type: 'redis', url: 42 }, 'backend.url'],
      [{ type: 'redis', client, url: 'redis://127.0.0.1:1' }, 'backend.client'],
      [{ type: 'redis', client, options: {} }, 'backend.client'],
      [{ type: 'redis', client: { evalsha() {} } }, 'backend.client'],
      [{ type: 'redis', options: 'redis://127.0.0.1:1' }, 'backend.options'],
      [{ type: 'redis', uri: 'redis://127.0.0.1:1' }, 'backend.uri'],
      [{ type: 'redis', url: 'unix:///run/redis.sock' }, 'backend.url'],
      [{ type: 'redis', url: '127.0.0.1:6379 ' }, 'backend.url'],
      [{ type: 'redis', url: 'redis://127.0.0.1:1', protocol: 'simple' }, 'backend.protocol'],
      [{ type: 'redis', url: 'redis://127.0.0.1:1', protocl: 'plain' }, 'backend.protocl'],
      [{ type: 'redis', url: 'redis://127.0.0.1:1', restartProtection: 'off' }, 'backend.restartProtection'],
    ];
    for (const [options, option] of cases) {
      await assert.rejects(createBackend(options as BackendOptions), (error: unknown) => {
        assert.ok(error instanceof LockConfigError, `${JSON.stringify(options)}: expected LockConfigError, got ${String(error)}`);
        assert.equal(error.option, option);
        return true;
      });
    }
    await assert.rejects(createBackend({ type: 'redis', ulr: 'redis://127.0.0.1:1' } as unknown as BackendOptions), /did you mean "backend\.url"/);
    assert.equal(client.status, 'wait', 'validation touched the supplied client');
    assert.doesNotThrow(() => resolveModuleOptions({ backend: { type: 'redis', url: 'redis://127.0.0.1:1' } }));
    client.disconnect();
  });

  describe('a user-supplied client', () => {
    let redis: RedisServer;
    before(async () => (redis = await startRedisServer()));
    after(() => redis.stop());

    it('is used as it is: never closed, no commands defined on it, no listeners left behind', async () => {
      const client = new Redis(redis.url);
      await client.ping();
      const snapshot = () => ({
        ownKeys: Reflect.ownKeys(client).map(String).sort(),
        listeners: client.eventNames().map((event) => `${String(event)}:${client.listenerCount(event)}`),
        scripts: Object.keys((client as unknown as { scriptsSet: object }).scriptsSet ?? {}),
        database: (client as unknown as { options: { db: number } }).options.db,
      });
      const before = snapshot();
      const service = lockServiceOver(await createBackend({ type: 'redis', client }));
      const holder = await service.acquire('user-client');
      const waiter = service.acquire('user-client', { waitTimeoutMs: 5_000 });
      await holder.release();
      await (await waiter).release();
      await service.onApplicationShutdown();
      assert.equal(client.status, 'ready', 'the backend closed the user client');
      assert.equal(await client.ping(), 'PONG');
      assert.deepEqual(snapshot(), before);
      const clients = (await client.client('LIST')) as string;
      assert.equal(clients.trim().split('\n').length, 1, `the backend left connections open:\n${clients}`);
      client.disconnect();
    });
  });
});
