import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import type { LockService } from '../../../lib';
import { createRedisBackend } from '../../../lib/backends/redis/redis.backend';
import { startRedisTlsServer, type RedisServer } from '../../../servers/redis-server';
import { makeTestCertificates, type TestCertificates } from '../../../servers/test-certificates';
import { lockServiceOver } from '../../support/lock-service-factory';
import { handsOverSecured, refusedWithin } from '../../support/secured-connection';

const SERVER_TIMEOUT_MS = 1_000;
/** A refused handshake must be reported by serverTimeoutMs; this much more for a loaded machine. */
const MARGIN_MS = 500;

/**
 * redis-server's own TLS port (`--port 0`: no plain port at all), trusting only a throwaway CA
 * and requiring client certificates (`--tls-auth-clients yes`). Debian's redis-server 7 is built
 * with TLS.
 */
describe('redis backend over TLS, client certificates required', () => {
  let certificates: TestCertificates;
  let redis: RedisServer;
  const services: LockService[] = [];
  /** `serverTimeoutMs`: the bound under test, or a wide one where only the outcome counts (a loaded machine's TLS handshakes can take a second). */
  const open = async (url: string, tls: Record<string, unknown> | undefined, serverTimeoutMs = SERVER_TIMEOUT_MS) => {
    const backend = await createRedisBackend({ type: 'redis', url, ...(tls ? { options: { tls } } : {}) }, { ttlMs: 10_000, serverTimeoutMs });
    const service = lockServiceOver(backend);
    services.push(service);
    return service;
  };
  before(async () => {
    certificates = await makeTestCertificates();
    redis = await startRedisTlsServer(certificates);
  });
  after(async () => {
    await Promise.all(services.map((service) => service.onApplicationShutdown()));
    await redis?.stop();
    await certificates?.remove();
  });

  it('takes, queues and hands a lock over rediss:// with the CA and a client certificate', async () => {
    assert.match(redis.url, /^rediss:\/\/127\.0\.0\.1:\d+$/);
    const tls = { ca: certificates.ca, cert: certificates.client.cert, key: certificates.client.key };
    const first = await open(redis.url, tls, 10_000);
    const second = await open(redis.url, tls, 10_000);
    // The waiter is granted through the release script's PUBLISH: the subscriber connection is TLS too.
    await handsOverSecured(first, second, 'tls-lock');
  });

  const refused: Array<{ name: string; url?: () => string; tls: () => Record<string, unknown> | undefined; says: RegExp }> = [
    {
      name: 'a server certificate from a CA the client does not trust',
      tls: () => ({ ca: certificates.strangerCa, cert: certificates.client.cert, key: certificates.client.key }),
      says: /TLS: the server's certificate is not trusted .*backend\.options\.tls\.ca/,
    },
    {
      name: 'no client certificate',
      tls: () => ({ ca: certificates.ca }),
      // TLS 1.3: the server's alert, or only the reset after it, whichever the client reads first.
      says: /TLS: the server (refused our client certificate \(tlsv13 alert certificate required\)|closed the connection during the handshake or before answering).*backend\.options\.tls\.cert/,
    },
    {
      name: 'a client certificate from a CA the server does not trust',
      tls: () => ({ ca: certificates.ca, cert: certificates.strangerClient.cert, key: certificates.strangerClient.key }),
      says: /TLS: the server (refused our client certificate \(tlsv1 alert unknown ca\)|closed the connection during the handshake or before answering).*backend\.options\.tls\.cert/,
    },
    {
      name: 'plain redis:// to the TLS port',
      url: () => redis.url.replace('rediss://', 'redis://'),
      tls: () => undefined,
      // Not TLS on our side, so nothing to explain: the reset, with the address.
      says: /ECONNRESET/,
    },
  ];
  for (const { name, url, tls, says } of refused) {
    it(`${name}: the first call fails with a LockBackendError that says so and names the server, within serverTimeoutMs`, async () => {
      const service = await open(url?.() ?? redis.url, tls());
      await refusedWithin(name, () => service.acquire('tls-refused', { waitTimeoutMs: 10_000 }), says, `127.0.0.1:${redis.port}`, SERVER_TIMEOUT_MS + MARGIN_MS);
    });
  }
});
