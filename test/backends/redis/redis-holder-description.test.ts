import { after, before, describe } from 'node:test';
import { Redis } from 'ioredis';
import type { BackendOptions } from '../../../lib';
import { createBackend } from '../../../lib/backends/registry';
import { commandsExecuted, startRedisServer, type RedisServer } from '../../../servers/redis-server';
import { lockServiceOver, moduleLikeService } from '../../support/lock-service-factory';
import { holderDescriptionCases, type HolderRecord } from '../holder-description-cases';

/**
 * Each process keeps its holder description in `{lock:}~holder~<client id>` with an expiry,
 * refreshed on a timer (redis-holder-records.ts); inspect reads the holders' records after its
 * script. The same for the native and the plain protocol.
 */
for (const protocol of ['native', 'plain'] as const) {
  describe(`redis backend (${protocol}): the holder description`, () => {
    let redis: RedisServer;
    let raw: Redis;
    const backend = (): BackendOptions => ({ type: 'redis', url: redis.url, protocol });

    before(async () => {
      redis = await startRedisServer();
      raw = new Redis(redis.url);
    });
    after(async () => {
      raw?.disconnect();
      await redis?.stop();
    });

    holderDescriptionCases(
      () => ({
        backend: backend(),
        records: async () => {
          const keys = await raw.keys('{lock:}~holder~*');
          return Promise.all(keys.map(async (key): Promise<HolderRecord> => ({ description: (await raw.get(key)) ?? '', expiresInMs: await raw.pttl(key) })));
        },
        counted: async (holderDescription) => {
          // Without a description: built as outside the module, which records nothing.
          const service =
            holderDescription === undefined
              ? lockServiceOver(await createBackend(backend(), { ttlMs: 30_000, serverTimeoutMs: 5_000 }))
              : (await moduleLikeService({ backend: backend(), holderDescription })).service;
          // Every command the server ran, those inside scripts too (INFO commandstats).
          return { service, work: async () => (await commandsExecuted((section) => raw.info(section))).total };
        },
      }),
      { readLocks: protocol === 'native', recordsPerProcess: true },
    );
  });
}
