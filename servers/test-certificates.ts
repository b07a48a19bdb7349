import { execFile } from 'node:child_process';
import { mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { promisify } from 'node:util';

const run = promisify(execFile);

/** One certificate and its key: the files (for a server's flags) and their PEM text (for a client). */
export interface CertificateFiles {
  readonly certFile: string;
  readonly keyFile: string;
  readonly cert: Buffer;
  readonly key: Buffer;
}

/**
 * A throwaway PKI made by `openssl` in a temp dir: a CA, a server certificate for 127.0.0.1 and
 * localhost, and a client certificate, both signed by that CA; plus a second, unrelated CA with
 * a client certificate of its own, for the "unknown CA" cases. Nothing is trusted by the system.
 */
export interface TestCertificates {
  readonly dir: string;
  readonly caFile: string;
  readonly ca: Buffer;
  readonly server: CertificateFiles;
  readonly client: CertificateFiles;
  /** A CA the servers do not trust, and a client certificate it signed. */
  readonly strangerCa: Buffer;
  readonly strangerClient: CertificateFiles;
  remove(): Promise<void>;
}

/** EC P-256: keys are made in milliseconds, where RSA would take a noticeable part of a second each. */
const KEY_ALGORITHM = ['-newkey', 'ec', '-pkeyopt', 'ec_paramgen_curve:prime256v1', '-nodes'];

export async function makeTestCertificates(): Promise<TestCertificates> {
  const dir = await mkdtemp(path.join(os.tmpdir(), 'lock-tls-'));
  try {
    const file = (name: string) => path.join(dir, name);
    const ca = await selfSignedCa(file('ca'), 'lock-test CA');
    const strangerCa = await selfSignedCa(file('stranger-ca'), 'unknown CA');
    const server = await signed(file('server'), ca, 'localhost', 'subjectAltName=IP:127.0.0.1,DNS:localhost\nextendedKeyUsage=serverAuth\n');
    const client = await signed(file('client'), ca, 'lock-client', 'extendedKeyUsage=clientAuth\n');
    const strangerClient = await signed(file('stranger-client'), strangerCa, 'lock-client', 'extendedKeyUsage=clientAuth\n');
    return {
      dir,
      caFile: ca.certFile,
      ca: ca.cert,
      server,
      client,
      strangerCa: strangerCa.cert,
      strangerClient,
      remove: () => rm(dir, { recursive: true, force: true }),
    };
  } catch (error) {
    await rm(dir, { recursive: true, force: true });
    throw new Error(`could not make test certificates with openssl: ${(error as Error).message}`);
  }
}

async function selfSignedCa(base: string, commonName: string): Promise<CertificateFiles> {
  const certFile = `${base}.crt`;
  const keyFile = `${base}.key`;
  await run('openssl', ['req', '-x509', ...KEY_ALGORITHM, '-keyout', keyFile, '-out', certFile, '-days', '2', '-subj', `/CN=${commonName}`]);
  return read(certFile, keyFile);
}

async function signed(base: string, ca: CertificateFiles, commonName: string, extensions: string): Promise<CertificateFiles> {
  const certFile = `${base}.crt`;
  const keyFile = `${base}.key`;
  const requestFile = `${base}.csr`;
  const extensionsFile = `${base}.ext`;
  await writeFile(extensionsFile, extensions);
  await run('openssl', ['req', '-new', ...KEY_ALGORITHM, '-keyout', keyFile, '-out', requestFile, '-subj', `/CN=${commonName}`]);
  await run('openssl', ['x509', '-req', '-in', requestFile, '-CA', ca.certFile, '-CAkey', ca.keyFile, '-CAcreateserial', '-out', certFile, '-days', '2', '-extfile', extensionsFile]);
  return read(certFile, keyFile);
}

async function read(certFile: string, keyFile: string): Promise<CertificateFiles> {
  return { certFile, keyFile, cert: await readFile(certFile), key: await readFile(keyFile) };
}
