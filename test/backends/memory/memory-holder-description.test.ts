import assert from 'node:assert/strict';
import { hostname } from 'node:os';
import { describe, it } from 'node:test';
import { MemoryLockBackend, MemoryLockStore } from '../../../lib';
import { lockServiceOver, moduleLikeService } from '../../support/lock-service-factory';

describe('memory backend: the holder description in inspect()', () => {
  it('this process by default (host name and pid); per client of a shared store, its own', async () => {
    const { service } = await moduleLikeService({});
    try {
      const handle = await service.acquire('described');
      assert.equal((await service.inspect('described')).holder?.description, `${hostname()} pid ${process.pid}`);
      await handle.release();
    } finally {
      await service.onApplicationShutdown();
    }
    // Clients of one store model processes: each holder shows its own client's description.
    const store = new MemoryLockStore();
    const [podA, podB] = [lockServiceOver(new MemoryLockBackend(store, 'pod-a')), lockServiceOver(new MemoryLockBackend(store, 'pod-b'))];
    try {
      const handle = await podA.acquire('shared');
      assert.equal((await podB.inspect('shared')).holder?.description, 'pod-a');
      await handle.release();
    } finally {
      await Promise.all([podA.onApplicationShutdown(), podB.onApplicationShutdown()]);
    }
  });

  it('holderDescription is checked: a non-empty string of at most 256 characters', async () => {
    await assert.rejects(moduleLikeService({ holderDescription: '' }), /Invalid distributed lock option "holderDescription": must be a non-empty string of at most 256 characters/);
    await assert.rejects(moduleLikeService({ holderDescription: 'x'.repeat(257) }), /holderDescription/);
  });
});
