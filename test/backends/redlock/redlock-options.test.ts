import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { LockConfigError } from '../../../lib';
import { createBackend, validateBackendOptions } from '../../../lib/backends/registry';

const urls = ['redis://127.0.0.1:1', 'redis://127.0.0.1:2', 'redis://127.0.0.1:3'];

/** Bad options fail with a LockConfigError naming the option, before any connection is made. */
describe('redlock options', () => {
  const rejects = (options: object, option: string) =>
    assert.throws(
      () => validateBackendOptions({ type: 'redlock', ...options }),
      (error: unknown) => error instanceof LockConfigError && error.option === option,
      `${JSON.stringify(options)} should be refused naming ${option}`,
    );

  it('needs at least 3 masters, each once, and either urls or clients', () => {
    rejects({}, 'backend.urls');
    rejects({ urls: urls.slice(0, 2) }, 'backend.urls');
    rejects({ urls: [urls[0], urls[0], urls[1]] }, 'backend.urls');
    rejects({ urls: ['http://127.0.0.1:1', ...urls.slice(1)] }, 'backend.urls');
    rejects({ urls, clients: [] }, 'backend.urls');
    rejects({ clients: [{}, {}, {}] }, 'backend.clients');
    validateBackendOptions({ type: 'redlock', urls: [...urls, 'redis://127.0.0.1:4'] }); // even: accepted, majority 3
  });

  it('checks the timing options and names a misspelt one', () => {
    rejects({ urls, requestTimeoutMs: '200' }, 'backend.requestTimeoutMs');
    rejects({ urls, requestTimeoutMs: 0 }, 'backend.requestTimeoutMs');
    rejects({ urls, driftFactor: 0.5 }, 'backend.driftFactor');
    rejects({ urls, driftFactor: -0.01 }, 'backend.driftFactor');
    rejects({ urls, retryJitterMs: -1 }, 'backend.retryJitterMs');
    rejects({ urls, restartProtection: 0 }, 'backend.restartProtection');
    rejects({ urls, requestTimeout: 100 }, 'backend.requestTimeout');
    validateBackendOptions({ type: 'redlock', urls, requestTimeoutMs: 50, driftFactor: 0, retryJitterMs: 0, restartProtection: false });
  });

  it('createBackend refuses bad options before connecting', async () => {
    await assert.rejects(createBackend({ type: 'redlock', urls: urls.slice(0, 1) }), LockConfigError);
  });
});
