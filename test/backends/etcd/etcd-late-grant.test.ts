import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { DEFAULT_KEY_PREFIX } from '../../../lib';
import { HolderProcess, type HolderCommand } from '../../support/holder-process';
import { eventually, FAULT_SUITE_TIMEOUT_MS, sleep } from '../../support/timing';
import { etcdFixture, request, within } from './etcd-test-kit';

/**
 * Contract point 7 on etcd: a waiter paused while the lock is handed to it, past its session,
 * is never handed a stale grant. Its key went with its session lease, the next waiter was
 * granted, and on resuming it finds its session over (the session's local deadline counts from
 * the send time of the last keepalive etcd answered) and gets an error.
 */
describe('etcd backend: a late grant', { timeout: FAULT_SUITE_TIMEOUT_MS }, () => {
  const etcd = etcdFixture();

  it('refuses the lock to a waiter that was paused past its session while the lock was handed to it', async () => {
    const name = `etcd-late-${process.pid}`;
    const key = `${DEFAULT_KEY_PREFIX}${name}`;
    const ttlMs = 1_500; // the paused process's session: 2 s
    const here = etcd.backend();
    const holder = await here.acquire(request(key, 'holder'));
    const paused = await HolderProcess.start('etcd', { hosts: etcd.cluster.hosts.join(',') }, ttlMs);
    try {
      paused.child.send({ type: 'acquire', name, waitTimeoutMs: 30_000 } satisfies HolderCommand);
      const keysUnder = async () => (await etcd.admin.getAll().prefix(`${key}/`).keys()).length;
      await eventually(async () => (await keysUnder()) === 2, 10_000, "the paused process's key in the queue", 20);
      const next = etcd.backend().acquire(request(key, 'next'));
      await eventually(async () => (await keysUnder()) === 3, 10_000, "the next waiter's key in the queue", 20);

      paused.kill('SIGSTOP');
      const pausedAt = Date.now();
      await here.release(holder, 20_000);
      // The lock is the paused process's now, until its session lease runs out at etcd.
      const grant = await within(next, 10_000, 'the next waiter after the paused one');
      const grantedMs = Date.now() - pausedAt;
      assert.ok(grant.fencingToken > holder.fencingToken);
      console.log(`paused waiter's session ran out: the next waiter was granted ${grantedMs} ms after the pause (session 2000 ms + etcd's 500 ms expiry check)`);
      assert.ok(grantedMs <= 2_000 + 1_500, `the next waiter waited ${grantedMs} ms`);

      paused.kill('SIGCONT');
      await eventually(() => paused.events.some((event) => event.type === 'acquired' || event.type === 'error'), 10_000, 'the resumed process to settle its wait');
      const outcome = paused.events.find((event) => event.type === 'acquired' || event.type === 'error')!;
      assert.equal(outcome.type, 'error', 'the resumed process took the stale grant for a fresh one');
      console.log(`resumed waiter: ${outcome.type === 'error' ? `${outcome.name}: ${outcome.message}` : ''}`);
      // And it did not disturb the holder it would have overlapped with.
      await sleep(200);
      assert.equal(await here.tryAcquire(request(key, 'probe')), null, 'the lock was freed under the next holder');
    } finally {
      paused.kill('SIGCONT');
      await paused.stop();
    }
  });
});
