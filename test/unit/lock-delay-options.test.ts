import 'reflect-metadata';
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { LockConfigError, LockService, MAX_LOCK_DELAY_MS, type BackendOptions, type LockBackend } from '../../lib';
import { MemoryLockBackend } from '../../lib/backends/memory/memory.backend';
import { createBackend } from '../../lib/backends/registry';
import { backendSettings, resolveModuleOptions } from '../../lib/lock-options';
import { countingBackend } from '../support/counting-backend';
import { lockServiceOver } from '../support/lock-service-factory';

/**
 * lockDelayMs (issue 28): 0 (off, the default) to 60 000 ms, Consul's cap; anything else, and a
 * delay asked of a backend that cannot enforce it at its server, is a LockConfigError naming the
 * option, before any I/O: at boot for the module's value, at the call for a call's.
 */

const untyped = (value: unknown) => value as never;

function isDelayError(pattern: RegExp) {
  return (error: unknown) => {
    assert.ok(error instanceof LockConfigError, `expected LockConfigError, got ${String(error)}`);
    assert.equal(error.option, 'lockDelayMs');
    assert.match(error.message, pattern);
    return true;
  };
}

const OUT_OF_RANGE = [-1, MAX_LOCK_DELAY_MS + 1, Infinity, NaN];

describe('lockDelayMs: the option', () => {
  it(`defaults to 0 (off) and takes 0 to ${MAX_LOCK_DELAY_MS}`, () => {
    assert.equal(resolveModuleOptions({}).lockDelayMs, 0);
    assert.equal(resolveModuleOptions({ lockDelayMs: MAX_LOCK_DELAY_MS }).lockDelayMs, MAX_LOCK_DELAY_MS);
    assert.equal(resolveModuleOptions({ lockDelayMs: 1_500 }).lockDelayMs, 1_500);
  });

  for (const value of OUT_OF_RANGE) {
    it(`module lockDelayMs ${value} fails the boot, naming the range`, () => {
      assert.throws(() => resolveModuleOptions({ lockDelayMs: value }), isDelayError(/0 \(off\) to 60000 milliseconds/));
    });
  }

  it('a string (an environment variable) is named as a string', () => {
    assert.throws(() => resolveModuleOptions({ lockDelayMs: untyped('2000') }), isDelayError(/string "2000"/));
  });

  for (const value of [-5, 60_001]) {
    it(`a call's lockDelayMs ${value} fails before the backend is asked`, async () => {
      const { backend, calls } = countingBackend(new MemoryLockBackend());
      const service = lockServiceOver(backend);
      try {
        await assert.rejects(service.acquire('delayed', { lockDelayMs: value }), isDelayError(/60000/));
        await assert.rejects(service.tryAcquire('delayed', { lockDelayMs: value }), isDelayError(/60000/));
        await assert.rejects(service.withLock('delayed', async () => undefined, { lockDelayMs: value }), isDelayError(/60000/));
        assert.deepEqual(calls, { acquire: 0, tryAcquire: 0, renew: 0, release: 0, inspect: 0, forceRelease: 0 });
      } finally {
        await service.onApplicationShutdown();
      }
    });
  }
});

/** A custom backend that queues nothing of its own and enforces no delay. */
function delaylessBackend(): LockBackend {
  const memory = new MemoryLockBackend();
  return {
    name: 'custom-store',
    maxKeyBytes: memory.maxKeyBytes,
    acquire: (request) => memory.acquire(request),
    tryAcquire: (request) => memory.tryAcquire(request),
    renew: (grant, ttlMs) => memory.renew(grant, ttlMs),
    release: (grant) => memory.release(grant),
    close: () => memory.close(),
  };
}

describe('lockDelayMs: a backend that cannot enforce it refuses it before any I/O', () => {
  it('a custom backend without LockBackend.lockDelay: at boot for the module value, at the call for a call value', async () => {
    const { backend, calls } = countingBackend(delaylessBackend());
    assert.throws(() => lockServiceOver(backend, { lockDelayMs: 1_000 }), isDelayError(/custom-store backend does not enforce a lock-delay/));
    const service = lockServiceOver(backend);
    try {
      await assert.rejects(service.acquire('delayed', { lockDelayMs: 1_000 }), isDelayError(/LockBackend\.lockDelay/));
      await assert.rejects(service.tryAcquire('delayed', { lockDelayMs: 1_000 }), isDelayError(/LockBackend\.lockDelay/));
      assert.equal(calls.acquire + calls.tryAcquire, 0);
      // Off (0), the same backend serves as before.
      const lock = await service.acquire('delayed', { lockDelayMs: 0 });
      await lock.release();
    } finally {
      await service.onApplicationShutdown();
    }
  });

  /** Built without a server: a refusal needs none, and the backends connect only in the background. */
  const refusing: { what: string; backend: BackendOptions; message: RegExp; kinds: ('lock' | 'read' | 'semaphore')[] }[] = [
    { what: "redis protocol 'plain'", backend: { type: 'redis', url: 'redis://127.0.0.1:1', protocol: 'plain' }, message: /protocol 'plain' cannot enforce lockDelayMs/, kinds: ['lock'] },
    { what: 'redis read locks and semaphores', backend: { type: 'redis', url: 'redis://127.0.0.1:1' }, message: /exclusive lock only/, kinds: ['read', 'semaphore'] },
    {
      what: "zookeeper protocol 'curator'",
      backend: { type: 'zookeeper', connectionString: '127.0.0.1:1', protocol: 'curator' },
      message: /protocol 'curator' cannot enforce lockDelayMs/,
      kinds: ['lock'],
    },
    { what: "etcd protocol 'lock-api'", backend: { type: 'etcd', hosts: ['http://127.0.0.1:1'], protocol: 'lock-api' }, message: /protocol 'lock-api' cannot enforce lockDelayMs/, kinds: ['lock'] },
  ];
  for (const { what, backend: options, message, kinds } of refusing) {
    it(`${what}: refused, naming what to change`, async () => {
      const resolved = resolveModuleOptions({ backend: options, serverTimeoutMs: 500 });
      const backend = await createBackend(resolved.backend, backendSettings(resolved));
      const service = new LockService(backend, resolved);
      try {
        for (const kind of kinds) {
          const call =
            kind === 'semaphore'
              ? service.acquireSemaphore('delayed', 2, { lockDelayMs: 1_000 })
              : service.acquire('delayed', { lockDelayMs: 1_000, ...(kind === 'read' ? { mode: 'read' as const } : {}) });
          await assert.rejects(call, isDelayError(message));
        }
        if (kinds.includes('lock')) {
          assert.throws(() => new LockService(backend, resolveModuleOptions({ backend: options, lockDelayMs: 1_000 })), isDelayError(message));
        }
      } finally {
        await backend.close();
      }
    });
  }
});
