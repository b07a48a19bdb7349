import type { BackendSettings } from '../backends/backend-definition';
import { DEFAULT_BACKEND_SETTINGS, type BackendOptions } from '../backends/registry';
import { LockConfigError } from '../errors';
import { backendSettings, resolveModuleOptions, type DistributedLockModuleOptions } from '../lock-options';

/** What the CLI checks: a backend's options and the settings the module would give it. */
export interface DoctorTarget {
  readonly backend: BackendOptions;
  readonly settings: BackendSettings;
}

/**
 * The CLI's arguments as backend options, in the shapes the module takes:
 * - a URL: `redis://` / `rediss://` (redis), `postgres://` / `postgresql://` (postgres),
 *   `etcd://host:port[,host:port]` / `etcds://` (etcd over http / https),
 *   `zookeeper://host:port[,host:port][/chroot]` or `zk://` (zookeeper), `memory`;
 * - several Redis URLs: the masters of a redlock;
 * - JSON: a backend's options (`{"type":"redis","url":...}`) or the module's
 *   (`{"backend":{...},"ttlMs":10000}`), whose ttlMs and serverTimeoutMs then apply.
 * `overrides` (the --ttl-ms and --server-timeout-ms flags) win over both.
 */
export function doctorTarget(args: readonly string[], overrides: Partial<BackendSettings>): DoctorTarget {
  if (args.length === 0) throw new LockConfigError('backend', 'name the backend to check: a URL (redis://host:6379) or JSON options.');
  let backend: BackendOptions;
  let settings: BackendSettings = DEFAULT_BACKEND_SETTINGS;
  if (args.length === 1 && args[0].trim().startsWith('{')) {
    const parsed = parseJson(args[0]) as Record<string, unknown>;
    if ('type' in parsed) {
      backend = parsed as unknown as BackendOptions;
    } else {
      const resolved = resolveModuleOptions(parsed as DistributedLockModuleOptions);
      backend = resolved.backend;
      settings = backendSettings(resolved);
    }
  } else if (args.length > 1) {
    if (!args.every(isRedisUrl)) throw new LockConfigError('backend.urls', `several addresses are a redlock's masters and must all be redis:// or rediss:// URLs, got ${args.join(' ')}.`);
    backend = { type: 'redlock', urls: [...args] };
  } else {
    backend = fromUrl(args[0]);
  }
  return { backend, settings: { ...settings, ...definedOnly(overrides) } };
}

function fromUrl(url: string): BackendOptions {
  if (url === 'memory') return { type: 'memory' };
  if (isRedisUrl(url)) return { type: 'redis', url };
  if (/^postgres(ql)?:\/\//i.test(url)) return { type: 'postgres', url };
  const etcd = /^etcd(s?):\/\/([^/]+)\/?$/i.exec(url);
  if (etcd) return { type: 'etcd', hosts: etcd[2].split(',').map((host) => `${etcd[1] ? 'https' : 'http'}://${host}`) };
  const zookeeper = /^(?:zookeeper|zk):\/\/(.+)$/i.exec(url);
  if (zookeeper) return { type: 'zookeeper', connectionString: zookeeper[1] };
  throw new LockConfigError(
    'backend',
    `cannot tell the backend of ${JSON.stringify(url)}: use redis://, rediss://, postgres://, etcd://, etcds://, zookeeper:// (or zk://), memory, several redis:// URLs for a redlock, or JSON options.`,
  );
}

function isRedisUrl(url: string): boolean {
  return /^rediss?:\/\/./i.test(url);
}

function parseJson(text: string): object {
  try {
    const parsed = JSON.parse(text) as unknown;
    if (typeof parsed === 'object' && parsed !== null && !Array.isArray(parsed)) return parsed;
  } catch (error) {
    throw new LockConfigError('backend', `the options are not valid JSON: ${(error as Error).message}`);
  }
  throw new LockConfigError('backend', 'the JSON options must be an object.');
}

function definedOnly(settings: Partial<BackendSettings>): Partial<BackendSettings> {
  return Object.fromEntries(Object.entries(settings).filter(([, value]) => value !== undefined));
}
