import { after, before, describe } from 'node:test';
import { Redis } from 'ioredis';
import type { BackendOptions } from '../../../lib';
import { createBackend } from '../../../lib/backends/registry';
import { RedisMasters } from '../../../servers/redis-masters';
import { commandsExecuted } from '../../../servers/redis-server';
import { lockServiceOver, moduleLikeService } from '../../support/lock-service-factory';
import { holderDescriptionCases, type HolderRecord } from '../holder-description-cases';

/**
 * Each process keeps its holder description on every master, in `{lock:}~holder~<client id>`
 * with an expiry, refreshed on a timer; inspect reads it from the first master that has it.
 */
describe('redlock backend: the holder description', () => {
  let masters: RedisMasters;
  let raws: Redis[];
  const backend = (): BackendOptions => ({ type: 'redlock', urls: masters.urls });

  before(async () => {
    masters = await RedisMasters.start(3);
    raws = masters.urls.map((url) => new Redis(url));
  });
  after(async () => {
    for (const raw of raws ?? []) raw.disconnect();
    await masters?.stop();
  });

  holderDescriptionCases(
    () => ({
      backend: backend(),
      // Every master's: a record is written to each, and must be gone from each after close.
      records: async () => {
        const perMaster = await Promise.all(
          raws.map(async (raw) => {
            const keys = await raw.keys('{lock:}~holder~*');
            return Promise.all(keys.map(async (key): Promise<HolderRecord> => ({ description: (await raw.get(key)) ?? '', expiresInMs: await raw.pttl(key) })));
          }),
        );
        return perMaster.flat();
      },
      counted: async (holderDescription) => {
        const service =
          holderDescription === undefined
            ? lockServiceOver(await createBackend(backend(), { ttlMs: 30_000, serverTimeoutMs: 5_000 }))
            : (await moduleLikeService({ backend: backend(), holderDescription })).service;
        // Every command the masters ran, those inside scripts too (INFO commandstats).
        const work = async () => (await Promise.all(raws.map(async (raw) => (await commandsExecuted((section) => raw.info(section))).total))).reduce((a, b) => a + b, 0);
        return { service, work };
      },
    }),
    { readLocks: false },
  );
});
