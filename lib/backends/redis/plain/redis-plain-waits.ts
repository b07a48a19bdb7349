import { Logger } from '@nestjs/common';
import type { RedisConnection } from '../redis-connection';
import { RELEASE_CHANNEL } from './redis-plain-scripts';

/**
 * The longest a waiter goes without trying again while the key is held. Plain clients announce
 * nothing when they release, so without keyspace notifications this is how late a waiter may
 * see their release at worst.
 */
export const RETRY_CAP_MS = 250;

const logger = new Logger('DistributedLock');

/** What a waiting key does: try again, for every batch of this process waiting for it. */
export type TryAgain = (key: string) => void;

interface KeyWait {
  timer?: NodeJS.Timeout;
  /** performance.now() when the timer fires. */
  dueAt: number;
  /** Subscribed to the key's keyspace channel (or subscribing). */
  watched: boolean;
}

/**
 * When the waiters of a plain lock try again, with no polling where Redis says when: at once on
 * this library's release announcement (RELEASE_CHANNEL, subscribed once per process) and, when
 * the server has keyspace notifications on for generic and expiry events, on the key's `del` or
 * `expired` event; else when the holder's lease runs out, at the latest RETRY_CAP_MS after the
 * last try (another client's release is told by nobody).
 */
export class PlainWaits {
  private readonly waiting = new Map<string, KeyWait>();
  /** `__keyspace@<db>__:<ioredis keyPrefix>`, once the server is known to publish del and expired there. */
  private keyspacePrefix?: string;

  constructor(
    private readonly client: RedisConnection,
    private readonly subscriber: RedisConnection & { unsubscribe(...channels: string[]): Promise<unknown> },
    private readonly tryAgain: TryAgain,
  ) {
    subscriber.on('message', (channel: string, message: string) => {
      if (channel === RELEASE_CHANNEL) return this.wake(message);
      const prefix = this.keyspacePrefix;
      if (prefix !== undefined && channel.startsWith(prefix) && (message === 'del' || message === 'expired' || message === 'evicted')) this.wake(channel.slice(prefix.length));
    });
  }

  /**
   * Asks the server whether it publishes keyspace events for del and expired (`K` with `g` and
   * `x`, or `A`). Not on a Cluster, whose events stay on the node of the key while our
   * subscriber listens on one node. A server that refuses CONFIG (managed Redis) leaves the
   * safety net alone, with a debug line.
   */
  async detectKeyspaceEvents(): Promise<void> {
    const client = this.client as RedisConnection & { isCluster?: boolean; config?: (...args: string[]) => Promise<unknown>; options?: { db?: number; keyPrefix?: string } };
    if (client.isCluster || typeof client.config !== 'function') return;
    try {
      const reply = (await client.config('GET', 'notify-keyspace-events')) as string[];
      const flags = reply?.[1] ?? '';
      const events = flags.includes('A') || (flags.includes('g') && flags.includes('x'));
      if (!flags.includes('K') || !events) return;
      this.keyspacePrefix = `__keyspace@${client.options?.db ?? 0}__:${client.options?.keyPrefix ?? ''}`;
      for (const key of this.waiting.keys()) this.watch(key);
    } catch (error) {
      logger.debug(`CONFIG GET notify-keyspace-events was refused, waiters of plain locks retry on a timer: ${(error as Error).message}`);
    }
  }

  /** The key is held by someone else for `pttlMs` more (-1: no expiry; -2: gone since): try again then, or sooner. */
  schedule(key: string, pttlMs: number): void {
    let wait = this.waiting.get(key);
    if (!wait) {
      this.waiting.set(key, (wait = { dueAt: Infinity, watched: false }));
      if (this.keyspacePrefix !== undefined) this.watch(key);
    }
    const delayMs = pttlMs === -2 ? 0 : pttlMs < 0 ? RETRY_CAP_MS : Math.min(pttlMs, RETRY_CAP_MS);
    const dueAt = performance.now() + delayMs;
    if (wait.timer && wait.dueAt <= dueAt) return;
    clearTimeout(wait.timer);
    wait.dueAt = dueAt;
    wait.timer = setTimeout(() => this.wake(key), delayMs);
  }

  /** Nobody of this process waits for the key any more. */
  remove(key: string): void {
    const wait = this.waiting.get(key);
    if (!wait) return;
    clearTimeout(wait.timer);
    this.waiting.delete(key);
    if (wait.watched) this.subscriber.unsubscribe(this.keyspacePrefix + key).catch(() => undefined);
  }

  /** Every waiting key tries again now (the subscriber came back: announcements were missed meanwhile). */
  wakeAll(): void {
    for (const key of [...this.waiting.keys()]) this.wake(key);
  }

  clear(): void {
    for (const key of [...this.waiting.keys()]) this.remove(key);
  }

  private wake(key: string): void {
    const wait = this.waiting.get(key);
    if (!wait) return;
    clearTimeout(wait.timer);
    wait.timer = undefined;
    wait.dueAt = Infinity;
    this.tryAgain(key);
  }

  /** Subscribes to the key's keyspace events; a release between the failed try and the subscription is caught by one more try. */
  private watch(key: string): void {
    const wait = this.waiting.get(key);
    if (!wait || wait.watched) return;
    wait.watched = true;
    this.subscriber.subscribe(this.keyspacePrefix + key).then(
      () => this.wake(key),
      () => (wait.watched = false),
    );
  }
}
