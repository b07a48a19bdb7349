import { LockBackendError } from '../../errors';
import { loadPeer } from '../load-peer';
import type { RedisBackendOptions, RedisClientLike } from './redis-options';

/** What the backend needs of a connection; ioredis' Redis and Cluster both have it. */
export interface RedisConnection extends RedisClientLike {
  subscribe(...channels: string[]): Promise<unknown>;
  on(event: string, listener: (...args: any[]) => void): unknown;
  disconnect(): void;
}

export interface RedisConnections {
  client: RedisConnection;
  /** Always ours: a duplicate of the client, in subscriber mode for the grant channel. */
  subscriber: RedisConnection;
  /** False for a user-supplied client, which the backend never closes. */
  ownsClient: boolean;
}

/**
 * Opens the connections and subscribes to `channel` before the backend is used, so waiting
 * never costs a SUBSCRIBE round trip. Connections we opened report errors through the commands
 * that hit them; their 'error' events are only kept from ioredis' "unhandled error" console noise.
 */
export async function openConnections(options: RedisBackendOptions, channel: string): Promise<RedisConnections> {
  const ownsClient = options.client === undefined;
  let client: RedisConnection;
  if (options.client) {
    client = options.client as RedisConnection;
  } else {
    const { Redis } = loadPeer<typeof import('ioredis')>('ioredis', 'redis');
    const clientOptions = (options.options ?? {}) as import('ioredis').RedisOptions;
    client = (options.url ? new Redis(options.url, clientOptions) : new Redis(clientOptions)) as unknown as RedisConnection;
    client.on('error', ignore);
  }
  const subscriber = client.duplicate() as RedisConnection;
  subscriber.on('error', ignore);
  try {
    await subscriber.subscribe(channel);
  } catch (error) {
    subscriber.disconnect();
    if (ownsClient) client.disconnect();
    throw new LockBackendError('redis', `subscribe to its grant channel "${channel}"`, error);
  }
  return { client, subscriber, ownsClient };
}

const ignore = () => undefined;
