import type { RedisBackendOptions } from './redis-options';

const DEFAULT_HOST = 'localhost';
const DEFAULT_PORT = 6379;

interface Endpoint {
  host?: unknown;
  port?: unknown;
}

/**
 * The server(s) as errors and warnings show them: `host:port`, a socket path, the sentinels
 * with the master's name, or a Cluster's startup nodes. Never a user name or password.
 */
export function redisAddress(options: RedisBackendOptions): string {
  if (options.client) return clientAddress(options.client);
  const fromUrl = options.url === undefined ? {} : parseAddress(options.url);
  // ioredis fills in from `options` what the URL leaves out: the URL's host and port win.
  return endpointAddress({ ...(options.options as Record<string, unknown> | undefined), ...fromUrl });
}

/** What a supplied ioredis `Redis` (its resolved `options`) or `Cluster` (its `startupNodes`) says. */
function clientAddress(client: object): string {
  const { options, startupNodes } = client as { options?: Record<string, unknown>; startupNodes?: unknown };
  if (Array.isArray(startupNodes)) {
    return `cluster ${startupNodes.map((node) => (typeof node === 'object' && node !== null ? hostPort(node as Endpoint) : typeof node === 'number' ? hostPort({ port: node }) : String(node))).join(', ')}`;
  }
  return typeof options === 'object' && options !== null ? endpointAddress(options) : 'the supplied client';
}

function endpointAddress(options: Record<string, unknown>): string {
  if (typeof options.path === 'string') return options.path;
  if (Array.isArray(options.sentinels) && options.sentinels.length > 0) {
    const sentinels = (options.sentinels as Endpoint[]).map((each) => hostPort({ host: each.host, port: each.port ?? 26379 })).join(', ');
    return `master "${String(options.name ?? 'mymaster')}" via sentinel ${sentinels}`;
  }
  return hostPort(options);
}

function hostPort({ host, port }: Endpoint): string {
  const name = typeof host === 'string' && host !== '' ? host : DEFAULT_HOST;
  return `${name.includes(':') && !name.startsWith('[') ? `[${name}]` : name}:${port ?? DEFAULT_PORT}`;
}

/** Host, port or path of an address as ioredis parses it (a URL, with or without its scheme). */
function parseAddress(url: string): { host?: string; port?: number; path?: string } {
  if (url.startsWith('/') && !url.startsWith('//')) return { path: url.split('?')[0] };
  try {
    const parsed = new URL(/^rediss?:\/\//i.test(url) ? url : `redis://${url.replace(/^\/\//, '')}`);
    const address: { host?: string; port?: number } = {};
    if (parsed.hostname) address.host = parsed.hostname;
    if (parsed.port) address.port = Number(parsed.port);
    return address;
  } catch {
    return {};
  }
}
