import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { Deadlines } from '../../lib/deadlines';
import { sleep } from '../support/timing';

/** The shared scheduler behind wait timeouts and leases. */
describe('Deadlines', () => {
  it('fires each deadline once, in time order, whatever order they were added in', async () => {
    const deadlines = new Deadlines();
    const fired: number[] = [];
    const start = performance.now();
    for (const offset of [60, 20, 40, 10, 50, 30]) deadlines.add(start + offset, () => fired.push(offset), true);
    await sleep(120);
    assert.deepEqual(fired, [10, 20, 30, 40, 50, 60]);
  });

  it('never fires a cancelled deadline, nor one before its time, and keeps the others', async () => {
    const deadlines = new Deadlines();
    const fired: string[] = [];
    const start = performance.now();
    const early = deadlines.add(start + 10, () => fired.push('early'), true);
    deadlines.add(start + 40, () => fired.push('late'), true);
    const middle = deadlines.add(start + 25, () => fired.push('middle'), true);
    const firstAt: number[] = [];
    deadlines.add(start + 30, () => firstAt.push(performance.now() - start), true);
    deadlines.cancel(early);
    deadlines.cancel(middle);
    deadlines.cancel(middle); // twice is harmless
    await sleep(70);
    assert.deepEqual(fired, ['late']);
    assert.ok(firstAt[0] >= 30, `fired ${firstAt[0]} ms in, before its 30 ms`);
  });

  it('lets a deadline firing add and cancel others', async () => {
    const deadlines = new Deadlines();
    const fired: string[] = [];
    const start = performance.now();
    const doomed = deadlines.add(start + 30, () => fired.push('doomed'), true);
    deadlines.add(start + 10, () => {
      fired.push('first');
      deadlines.cancel(doomed);
      deadlines.add(performance.now() + 5, () => fired.push('added'), true);
    }, true);
    await sleep(60);
    assert.deepEqual(fired, ['first', 'added']);
  });

  it('stays correct over many interleaved adds and cancels', async () => {
    const deadlines = new Deadlines();
    const fired: number[] = [];
    const kept = new Set<number>();
    const start = performance.now();
    const all = Array.from({ length: 500 }, (_, i) => {
      const at = start + 5 + ((i * 37) % 50);
      return { i, at, deadline: deadlines.add(at, () => fired.push(i), true) };
    });
    for (const { i, deadline } of all) {
      if (i % 3 === 0) deadlines.cancel(deadline);
      else kept.add(i);
    }
    await sleep(100);
    assert.equal(fired.length, kept.size);
    assert.deepEqual(new Set(fired), kept);
    const ats = fired.map((i) => all[i].at);
    for (let k = 1; k < ats.length; k++) assert.ok(ats[k] >= ats[k - 1], 'fired out of order');
  });
});
