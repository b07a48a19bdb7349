import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import type { LockService } from '../../../lib';
import type { EtcdBackendOptions } from '../../../lib/backends/etcd/etcd-options';
import { createEtcdBackend } from '../../../lib/backends/etcd/etcd.backend';
import { createEtcdLockApiBackend } from '../../../lib/backends/etcd/lock-api/etcd-lock-api.backend';
import { EtcdCluster } from '../../../servers/etcd-server';
import { makeTestCertificates, type TestCertificates } from '../../../servers/test-certificates';
import { lockServiceOver } from '../../support/lock-service-factory';
import { handsOverSecured, refusedWithin } from '../../support/secured-connection';

const SERVER_TIMEOUT_MS = 1_000;
/** A refused handshake must be reported by serverTimeoutMs; this much more for a loaded machine. */
const MARGIN_MS = 500;

/**
 * etcd serving clients over https only, with a throwaway CA's certificate, and requiring a client
 * certificate that CA signed (`--client-cert-auth --trusted-ca-file`). The backend passes
 * `credentials` to etcd3; its session lease, transactions and watches all go over TLS.
 */
describe('etcd backend over https with client certificates', () => {
  let certificates: TestCertificates;
  let cluster: EtcdCluster;
  const services: LockService[] = [];
  /** `serverTimeoutMs`: the bound under test, or a wide one where only the outcome counts (a loaded machine's TLS handshakes can take a second). */
  const open = (options: Omit<EtcdBackendOptions, 'type'>, serverTimeoutMs = SERVER_TIMEOUT_MS) => {
    const settings = { ttlMs: 10_000, serverTimeoutMs };
    const backend = options.protocol === 'lock-api' ? createEtcdLockApiBackend({ type: 'etcd', ...options }, settings) : createEtcdBackend({ type: 'etcd', ...options }, settings);
    const service = lockServiceOver(backend);
    services.push(service);
    return service;
  };
  before(async () => {
    certificates = await makeTestCertificates();
    cluster = await EtcdCluster.start(1, { tls: certificates });
  });
  after(async () => {
    await Promise.all(services.map((service) => service.onApplicationShutdown()));
    await cluster?.stop();
    await certificates?.remove();
  });

  it('takes, queues and hands a lock over https with the CA and a client certificate', async () => {
    assert.match(cluster.hosts[0], /^https:\/\/127\.0\.0\.1:\d+$/);
    const first = open({ hosts: cluster.hosts, credentials: cluster.credentials }, 10_000);
    const second = open({ hosts: cluster.hosts, credentials: cluster.credentials }, 10_000);
    // The waiter is granted through its watch on the holder's key: the watch stream is TLS too.
    await handsOverSecured(first, second, 'tls-lock');
  });

  it("protocol 'lock-api': the waiter's Lock call goes over etcd3's TLS channel, and the lock is handed over", async () => {
    const first = open({ hosts: cluster.hosts, credentials: cluster.credentials, protocol: 'lock-api' }, 10_000);
    const second = open({ hosts: cluster.hosts, credentials: cluster.credentials, protocol: 'lock-api' }, 10_000);
    await handsOverSecured(first, second, 'tls-lock-api');
  });

  const refused: Array<{ name: string; options: () => Omit<EtcdBackendOptions, 'type'>; says: RegExp }> = [
    {
      name: 'a server certificate from a CA the client does not trust',
      options: () => ({ hosts: cluster.hosts, credentials: { rootCertificate: certificates.strangerCa, privateKey: certificates.client.key, certChain: certificates.client.cert } }),
      says: /TLS: the server's certificate is not trusted \(unable to verify the first certificate\); give the CA that signed it in backend\.credentials\.rootCertificate/,
    },
    {
      name: 'no client certificate',
      options: () => ({ hosts: cluster.hosts, credentials: { rootCertificate: certificates.ca } }),
      says: /TLS: the server refused our client certificate \(sslv3 alert bad certificate\); .*backend\.credentials\.certChain and backend\.credentials\.privateKey/,
    },
    {
      name: 'a client certificate from a CA the server does not trust',
      options: () => ({ hosts: cluster.hosts, credentials: { rootCertificate: certificates.ca, privateKey: certificates.strangerClient.key, certChain: certificates.strangerClient.cert } }),
      says: /TLS: the server refused our client certificate \(sslv3 alert bad certificate\); .*backend\.credentials\.certChain/,
    },
    {
      name: 'plain http to the https port',
      options: () => ({ hosts: cluster.hosts.map((host) => host.replace('https://', 'http://')) }),
      // Not TLS on our side, so nothing to explain: the server could not be reached, as gRPC or the silence says.
      says: /^Could not reach the etcd server at /,
    },
  ];
  it('https to a plain http port: the first call fails with a LockBackendError that says the server does not speak TLS there', async () => {
    const plain = await EtcdCluster.start(1);
    try {
      const service = open({ hosts: plain.hosts.map((host) => host.replace('http://', 'https://')), credentials: cluster.credentials });
      await refusedWithin(
        'https to a plain port',
        () => service.tryAcquire('tls-plain'),
        /TLS: the server closed the connection during the handshake .*the port may not serve TLS/,
        new URL(plain.hosts[0]).host,
        SERVER_TIMEOUT_MS + MARGIN_MS,
      );
    } finally {
      await plain.stop();
    }
  });

  for (const { name, options, says } of refused) {
    it(`${name}: the first call fails with a LockBackendError that says so and names the server, within serverTimeoutMs`, async () => {
      const service = open(options());
      await refusedWithin(name, () => service.acquire('tls-refused', { waitTimeoutMs: 10_000 }), says, new URL(cluster.hosts[0]).host, SERVER_TIMEOUT_MS + MARGIN_MS);
    });
  }
});
