import { Logger } from '@nestjs/common';
import { randomBytes } from 'node:crypto';
import type { RedisConnections } from './redis-connection';
import { beginLifeScript, LIFE_KEY, quarantineScript, readLifeScript, type LifeReply } from './server-life-scripts';

const logger = new Logger('DistributedLock');

const newLifeId = () => randomBytes(9).toString('base64url');

/**
 * What this process knows of one Redis server's life (server-life-scripts.ts), and what it does
 * when a grant script finds no marker: a server it never saw with one is on its first boot (the
 * marker is written, the caller asks again); a server it saw with one lost its data, and is
 * closed to every grant for the longest ttl this process knows of, which outlasts every lease
 * of the former life (a holder's lease counts from before the loss). Each process that knew the
 * server extends the quarantine to its own longest ttl as it reconnects. A replica promoted by a
 * failover (ReconnectCheck) is closed the same way, whatever its marker says.
 */
export class ServerLife {
  /** The id of the life this process saw, once read. */
  private knownId?: string;
  /** A grant script answered past the life check: the server had a marker. */
  private seen = false;
  /** The longest ttl asked for here or recorded in the marker: no lease of the server's outlasts it from its last renewal. */
  private longest: number;
  /** The marker is being written or the quarantine begun: callers share it. */
  private settling?: Promise<number>;

  constructor(
    private readonly connections: RedisConnections,
    /** The module's ttlMs: the least a quarantine lasts. */
    ttlMs: number,
    /** restartProtection: when false a missing marker is always a first boot. */
    private readonly protect: boolean,
    private readonly backend: 'redis' | 'redlock',
  ) {
    this.longest = ttlMs;
  }

  get longestTtlMs(): number {
    return this.longest;
  }

  /** A grant script asked for `ttlMs`: a quarantine must cover a lease that long. */
  asked(ttlMs: number): void {
    if (ttlMs > this.longest) this.longest = ttlMs;
  }

  /** A grant script answered past the life check. The marker's id is read once, to recognise a new life later. */
  answered(): void {
    if (this.seen) return;
    this.seen = true;
    if (this.knownId === undefined && this.protect) void this.read();
  }

  /**
   * What to do after a grant script's LifeReply: resolves with how long to wait before asking
   * again (0: at once, the marker is written).
   */
  after(reply: LifeReply): Promise<number> {
    if (reply[0] === -3) return Promise.resolve(reply[2]);
    return this.settle(() => (this.protect && (this.seen || this.knownId !== undefined) ? this.quarantine(false) : this.begin()));
  }

  /** The connection came back: a restart that lost the data is found (Redlock; the Redis backend has ReconnectCheck). */
  reconnected(): void {
    if (this.protect && (this.seen || this.knownId !== undefined)) void this.read();
  }

  /**
   * What ReconnectCheck read after a reconnection: the marker's `id` and `ttl`, and whether the
   * server is not the one this process knew (`failedOver`: a promoted replica, which may lack the
   * last grants however its marker looks). Resolves once a quarantine that is due has begun.
   */
  async reconnectedTo(id: string | null, ttl: string | null, failedOver: boolean): Promise<void> {
    if (ttl !== null) this.asked(Number(ttl));
    if (!this.protect || !(this.seen || this.knownId !== undefined)) return;
    if (failedOver) await this.settle(() => this.quarantine(true));
    else await this.judge(id);
  }

  /** Reads the marker: gone, or another life's, after this process saw one = the data was lost. */
  private async read(): Promise<void> {
    try {
      const [id, ttl] = await this.connections.runScript(readLifeScript, [LIFE_KEY], [], 'read the life marker');
      if (ttl !== null) this.asked(Number(ttl));
      await this.judge(id);
    } catch {
      // Unreachable again: the next reconnection or grant script asks again.
    }
  }

  /** The marker read has the id `id`: a missing one, or another life's, after this process saw one = the data was lost. */
  private async judge(id: string | null): Promise<void> {
    if (id !== null && (this.knownId === undefined || id === this.knownId)) {
      this.knownId = id;
      return;
    }
    await this.settle(() => this.quarantine(false));
  }

  private settle(how: () => Promise<number>): Promise<number> {
    return (this.settling ??= how().finally(() => (this.settling = undefined)));
  }

  private async begin(): Promise<number> {
    const [id, ttl] = await this.connections.runScript(beginLifeScript, [LIFE_KEY], [newLifeId(), this.longest], 'write the life marker');
    this.knownId = id;
    this.asked(Number(ttl));
    return 0;
  }

  /** `failedOver`: the server's marker may be the known one, its data still older than what this process saw. */
  private async quarantine(failedOver = false): Promise<number> {
    const quarantineMs = this.longest;
    const known = failedOver ? '' : (this.knownId ?? '');
    const [id, leftMs] = await this.connections.runScript(quarantineScript, [LIFE_KEY], [known, newLifeId(), quarantineMs], 'close a restarted server to grants');
    const lost = id !== this.knownId;
    this.knownId = id;
    if (failedOver) {
      logger.warn(
        `The ${this.backend} server at ${this.connections.address} is a replica promoted by a failover (its replication history follows the primary this process knew): ` +
          `replication is asynchronous, so it may have missed the last grants while their holders still run. No lock is granted there for ${leftMs} ms, ` +
          `until every lease granted before the failover has ended. restartProtection: false skips the wait.`,
      );
    } else if (lost) {
      logger.warn(
        `The ${this.backend} server at ${this.connections.address} lost its data (a restart without persistence, or a flush): its locks are gone while their ` +
          `holders may still run. No lock is granted there for ${leftMs} ms, until every lease of its former life has ended. ` +
          `Turn on persistence (appendonly yes, appendfsync always); restartProtection: false skips the wait.`,
      );
    }
    return leftMs;
  }
}
