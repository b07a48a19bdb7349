import 'reflect-metadata';
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { currentLock, MemoryLockBackend } from '../../lib';
import { IDLE_DISABLE_MS, lockContext, lockScopesEntered, YOUNG_PROCESS_SCOPES } from '../../lib/lock-context';
import { lockServiceOver } from '../support/lock-service-factory';
import { eventually, sleep } from '../support/timing';

// Node's AsyncLocalStorage keeps whether its hooks run in `enabled` (not public API).
const enabled = () => (lockContext as unknown as { enabled: boolean }).enabled;

/** When the lock context's AsyncLocalStorage runs Node's promise hooks. The tests run in order, in this file's own process. */
describe('the lock context', () => {
  it("a young process's locks turn the hooks off as each release begins, and re-entrancy still holds inside them", async () => {
    assert.equal(lockScopesEntered(), 0, 'this file runs in a fresh process');
    const service = lockServiceOver(new MemoryLockBackend());
    while (lockScopesEntered() < YOUNG_PROCESS_SCOPES) {
      await service.withLock('young', async () => {
        await sleep(0);
        assert.equal(enabled(), true, 'off inside a lock scope');
        assert.equal(currentLock()?.key, 'young');
        await service.withLock('young', (inner) => assert.equal(inner.reentrant, true));
      });
      assert.equal(enabled(), false, `still on after lock ${lockScopesEntered()} of a young process`);
    }
  });

  it('later, the hooks stay on while locks keep coming, go off once idle, and come back with the next lock', async () => {
    assert.ok(lockScopesEntered() >= YOUNG_PROCESS_SCOPES, 'the process is past its young locks');
    const service = lockServiceOver(new MemoryLockBackend());
    const startedAt = Date.now();
    while (Date.now() - startedAt < IDLE_DISABLE_MS * 1.5) {
      await service.withLock('busy', () => sleep(5));
      assert.equal(enabled(), true, `disabled between locks ${Date.now() - startedAt} ms into a busy run`);
    }
    await eventually(() => !enabled(), IDLE_DISABLE_MS * 3, 'the storage to be disabled once no lock was entered');
    await service.withLock('after idle', async () => {
      await sleep(1);
      assert.equal(currentLock()?.key, 'after idle');
      await service.withLock('after idle', (inner) => assert.equal(inner.reentrant, true));
    });
  });
});
