import 'reflect-metadata';
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { MemoryLockBackend } from '../../lib';
import { GrantWithLoss, unwatchGrantLoss, watchGrantLoss } from '../../lib/grant-loss';
import { LazyAbort } from '../../lib/lazy-abort';
import { abortRecorder } from '../support/abort-recorder';
import { lockServiceOver } from '../support/lock-service-factory';

describe("a grant's lost signal made on demand (LazyAbort)", () => {
  it('tells every watcher once, and a signal asked for before or after the loss is aborted with its reason', () => {
    const loss = new LazyAbort();
    const early = new GrantWithLoss('k', 'a', 1n, loss).lost;
    const [first, second, gone] = [abortRecorder(), abortRecorder(), abortRecorder()];
    const grants = [new GrantWithLoss('k', 'a', 1n, loss), new GrantWithLoss('k', 'b', 2n, loss)];
    watchGrantLoss(grants[0], first);
    watchGrantLoss(grants[1], second);
    watchGrantLoss(grants[1], gone);
    unwatchGrantLoss(grants[1], gone);
    const reason = new Error('lease ended');
    loss.abort(reason);
    loss.abort(new Error('a second loss is no news'));
    assert.deepEqual([first.told, second.told, gone.told], [[reason], [reason], []]);
    assert.equal(early.aborted, true);
    assert.equal(early.reason, reason);
    const late = grants[1].lost;
    assert.equal(late.aborted, true, 'a signal made after the loss starts aborted');
    assert.equal(late.reason, reason);
  });

  it("a wrapping backend's copy of the grant keeps a lost signal that fires with the original's", () => {
    const loss = new LazyAbort();
    const copy = { ...new GrantWithLoss('k', 'a', 1n, loss), requestedAt: 5 };
    const told = abortRecorder();
    watchGrantLoss(copy, told);
    loss.abort('gone');
    assert.equal(copy.lost.aborted, true);
    assert.deepEqual(told.told, ['gone']);
  });

  it('tells a watcher that comes after the loss at once', () => {
    const loss = new LazyAbort();
    const reason = new Error('session expired');
    loss.abort(reason);
    const late = abortRecorder();
    watchGrantLoss(new GrantWithLoss('k', 'a', 1n, loss), late);
    assert.deepEqual(late.told, [reason]);
  });

  it("a plain grant's AbortSignal is still listened to", () => {
    const controller = new AbortController();
    const grant = { key: 'k', owner: 'a', fencingToken: 1n, lost: controller.signal };
    const [kept, left] = [abortRecorder(), abortRecorder()];
    watchGrantLoss(grant, kept);
    watchGrantLoss(grant, left);
    unwatchGrantLoss(grant, left);
    controller.abort('gone');
    assert.deepEqual([kept.told, left.told], [['gone'], []]);
  });

  it('a memory lock taken and released makes no AbortSignal, and one force-released still fires its handle', async () => {
    const service = lockServiceOver(new MemoryLockBackend());
    const Original = globalThis.AbortController;
    let made = 0;
    globalThis.AbortController = class extends Original {
      constructor() {
        super();
        made++;
      }
    };
    try {
      for (let i = 0; i < 100; i++) await service.withLock('plain', () => undefined);
    } finally {
      globalThis.AbortController = Original;
    }
    assert.equal(made, 0, `${made} AbortControllers made by 100 lock cycles`);
    const handle = await service.acquire('forced');
    assert.equal(await service.forceRelease('forced'), true);
    assert.equal(handle.signal.aborted, true, "a forced release did not fire the holder's signal");
    await handle.release();
    await service.onApplicationShutdown();
  });
});
