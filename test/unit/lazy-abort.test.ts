import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { LazyAbort, signalOf, unwatchStop, watchStop } from '../../lib/lazy-abort';
import { abortRecorder } from '../support/abort-recorder';

describe('a stop that makes its AbortSignal only when asked (LazyAbort)', () => {
  it('reads as an AbortSignal does: aborted, reason, throwIfAborted', () => {
    const stop = new LazyAbort();
    assert.equal(stop.aborted, false);
    assert.equal(stop.reason, undefined);
    stop.throwIfAborted();
    const reason = new Error('withdrawn');
    stop.abort(reason);
    stop.abort(new Error('a second abort is ignored'));
    assert.equal(stop.aborted, true);
    assert.equal(stop.reason, reason);
    assert.throws(() => stop.throwIfAborted(), (error) => error === reason);
    // Made after the abort: already aborted, with the first reason.
    assert.equal(signalOf(stop).aborted, true);
    assert.equal(signalOf(stop).reason, reason);
  });

  it('tells watchers of a LazyAbort and of an AbortSignal alike, once, and not after unwatchStop', () => {
    const lazy = new LazyAbort();
    const controller = new AbortController();
    const [lazyKept, lazyLeft, signalKept, signalLeft] = [abortRecorder(), abortRecorder(), abortRecorder(), abortRecorder()];
    watchStop(lazy, lazyKept);
    watchStop(lazy, lazyLeft);
    unwatchStop(lazy, lazyLeft);
    watchStop(controller.signal, signalKept);
    watchStop(controller.signal, signalLeft);
    unwatchStop(controller.signal, signalLeft);
    const signal = signalOf(lazy); // made while watchers wait: both the signal and the watchers fire
    lazy.abort('lazy');
    lazy.abort('again');
    controller.abort('plain');
    assert.deepEqual([lazyKept.told, lazyLeft.told, signalKept.told, signalLeft.told], [['lazy'], [], ['plain'], []]);
    assert.equal(signal.reason, 'lazy');
    // A watcher that comes after the abort is told at once.
    const late = abortRecorder();
    watchStop(lazy, late);
    watchStop(controller.signal, late);
    assert.deepEqual(late.told, ['lazy', 'plain']);
  });

  it('signalOf passes an AbortSignal through, and makes a LazyAbort\'s once', () => {
    const controller = new AbortController();
    assert.equal(signalOf(controller.signal), controller.signal);
    const lazy = new LazyAbort();
    assert.equal(signalOf(lazy), signalOf(lazy));
  });
});
