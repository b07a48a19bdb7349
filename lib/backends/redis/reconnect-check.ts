import type { RedisConnections } from './redis-connection';
import type { ServerLife } from './server-life';
import { LIFE_KEY, reconnectedScript } from './server-life-scripts';

/** `master_replid2` of a server whose history has no other before it (a primary since it started). */
const NO_FORMER_HISTORY = /^0+$/;

/**
 * Checks the server behind the command connection each time that connection comes back, before
 * this process sends it a script that may grant (ServerLife decides what follows). A server is
 * known by its replication id (`master_replid`), read when the connection first comes up: one
 * found later with another id and a former one (`master_replid2`, set when a replica is
 * promoted) is a replica promoted by a failover, which may lack the last grants even when its
 * life marker is the one this process saw. A restart, with or without persistence, takes a new
 * id with no former one (Redis 7.0), and is judged by the marker alone. See docs/redis.md,
 * "Sentinel failover".
 */
export class ReconnectCheck {
  /** The `master_replid` of the server this process knows, once read. */
  private replicationId?: string;
  private readyOnce = false;
  /** Times the connection closed: a check passes only for the connection it ran on. */
  private closes = 0;
  private checkedCloses = 0;
  private running?: Promise<void>;

  constructor(
    private readonly connections: RedisConnections,
    private readonly life: ServerLife,
  ) {
    const client = connections.client;
    client.on('close', this.closed);
    client.on('ready', this.ready);
    if (client.status === 'ready') this.ready();
  }

  /** Leaves the client as it was (a user-supplied client outlives the backend). */
  close(): void {
    this.connections.client.removeListener('close', this.closed);
    this.connections.client.removeListener('ready', this.ready);
  }

  /**
   * Undefined when the connection is checked (the common case: no promise); else the check,
   * which a script that may grant waits for (its failure is that script's failure).
   */
  before(): Promise<void> | undefined {
    if (!this.readyOnce) return undefined;
    // The connection dropped, and its 'close' event has not come yet.
    const status = this.connections.client.status;
    if (status !== undefined && status !== 'ready' && this.closes === this.checkedCloses) this.closes++;
    if (this.closes === this.checkedCloses) return undefined;
    return (this.running ??= this.run());
  }

  private readonly closed = (): void => {
    if (this.readyOnce) this.closes++;
  };

  private readonly ready = (): void => {
    if (!this.readyOnce) {
      this.readyOnce = true;
      // The first connection: the id is only recorded; nothing waits for it.
      void (this.running ??= this.run()).catch(() => undefined);
    } else if (this.closes !== this.checkedCloses) {
      void (this.running ??= this.run()).catch(() => undefined);
    }
  };

  private async run(): Promise<void> {
    const closes = this.closes;
    try {
      const [id, ttl, replicationId, formerId] = await this.connections.runScript(reconnectedScript, [LIFE_KEY], [], 'check the server after reconnecting');
      const known = this.replicationId;
      const failedOver = known !== undefined && replicationId != null && replicationId !== known && formerId != null && !NO_FORMER_HISTORY.test(formerId);
      await this.life.reconnectedTo(id ?? null, ttl ?? null, failedOver);
      if (replicationId != null) this.replicationId = replicationId;
      if (closes === this.closes) this.checkedCloses = closes;
    } finally {
      this.running = undefined;
    }
  }
}
