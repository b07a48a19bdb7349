import { after, before, describe } from 'node:test';
import { Redis } from 'ioredis';
import type { BackendOptions } from '../../../lib';
import { createBackend } from '../../../lib/backends/registry';
import { RedisMasters } from '../../../servers/redis-masters';
import { lockServiceOver, moduleLikeService } from '../../support/lock-service-factory';
import { holderDescriptionCases, type HolderRecord } from '../holder-description-cases';

/**
 * Each process keeps its holder description on every master, in `{lock:}~holder~<client id>`
 * with an expiry, refreshed on a timer; inspect reads it from the first master that has it.
 */
describe('redlock backend: the holder description', () => {
  let masters: RedisMasters;
  let raws: Redis[];
  /** Commands that named a holder record, as master 0 ran them (MONITOR). */
  let recordCommands = 0;
  let monitor: Redis | undefined;
  /** Resolves when MONITOR shows an ECHO of this text: every command run before it was seen. */
  const seen = new Map<string, () => void>();
  const backend = (): BackendOptions => ({ type: 'redlock', urls: masters.urls });

  before(async () => {
    masters = await RedisMasters.start(3);
    raws = masters.urls.map((url) => new Redis(url));
    monitor = await raws[0].duplicate().monitor();
    monitor.on('monitor', (_time: string, args: string[]) => {
      if (args.some((arg) => arg.includes('~holder~'))) recordCommands++;
      if (args[0]?.toLowerCase() === 'echo') seen.get(args[1])?.();
    });
  });
  after(async () => {
    monitor?.disconnect();
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
        // A vote goes to the masters a majority needs, so the count of all commands varies from
        // run to run; what must not happen is a write of the record during lock calls: counted
        // are the commands that named a record (0 for either service unless a lock call writes one).
        const work = async () => {
          const mark = `counted-${seen.size}`;
          await new Promise<void>((resolve) => {
            seen.set(mark, resolve);
            void raws[0].echo(mark);
          });
          return recordCommands;
        };
        return { service, work };
      },
    }),
    { readLocks: false, recordsPerProcess: true },
  );
});
