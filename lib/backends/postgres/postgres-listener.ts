import type { Client, ClientConfig, Notification } from 'pg';

/** Between reconnection attempts of the LISTEN connection: the first soon, then at most this. */
const RECONNECT_MIN_MS = 50;
const RECONNECT_MAX_MS = 1_000;

export interface ListenerEvents {
  /** A notification on the process's channel: a grant to one of its queue entries. */
  notified(payload: string): void;
  /** LISTEN is in place (again): notifications sent before, or while disconnected, are lost. */
  resumed(): void;
  /** The connection failed; the error says why (for `unreachable()`). */
  failed(error: Error): void;
}

/**
 * The process's one LISTEN connection: it listens on the process's own channel, on which the
 * database notifies a queue entry that it was granted the lock. Connects in the background and
 * reconnects for as long as the backend is open; each time LISTEN is in place, `resumed` lets
 * the backend check what it may have missed.
 */
export class PostgresListener {
  private client?: Client;
  private listening = false;
  private listens = 0;
  private closed = false;
  private retryMs = RECONNECT_MIN_MS;
  private retryTimer?: NodeJS.Timeout;

  constructor(
    private readonly ClientClass: new (config: ClientConfig) => Client,
    private readonly config: ClientConfig,
    readonly channel: string,
    private readonly events: ListenerEvents,
  ) {
    this.connect();
  }

  /** LISTEN is in place: a grant notified from now on reaches this process. */
  get isListening(): boolean {
    return this.listening;
  }

  /**
   * Which LISTEN is in place: changes each time it is (re)established, undefined while none is.
   * A grant notified before LISTEN was in place is lost, so a statement sent under another
   * generation than the one in place when it is answered may have missed its grant.
   */
  get generation(): number | undefined {
    return this.listening ? this.listens : undefined;
  }

  close(): void {
    this.closed = true;
    clearTimeout(this.retryTimer);
    this.drop();
  }

  private connect(): void {
    if (this.closed) return;
    const client = new this.ClientClass(this.config);
    this.client = client;
    const lost = (error: Error) => {
      if (this.client !== client) return;
      this.events.failed(error);
      this.drop();
      this.retryTimer = setTimeout(() => this.connect(), this.retryMs);
      this.retryTimer.unref();
      this.retryMs = Math.min(this.retryMs * 2, RECONNECT_MAX_MS);
    };
    client.on('error', lost);
    client.on('end', () => lost(new Error('the LISTEN connection ended')));
    client.on('notification', (message: Notification) => {
      if (message.channel === this.channel && message.payload !== undefined) this.events.notified(message.payload);
    });
    client
      .connect()
      .then(() => client.query(`LISTEN "${this.channel}"`))
      .then(
        () => {
          if (this.client !== client) return;
          this.listening = true;
          this.listens++;
          this.retryMs = RECONNECT_MIN_MS;
          this.events.resumed();
        },
        (error: Error) => lost(error),
      );
  }

  private drop(): void {
    const client = this.client;
    this.client = undefined;
    this.listening = false;
    // A connection that failed may still be open half-way: end it, ignoring what it says now.
    client?.removeAllListeners();
    client?.on('error', () => undefined);
    void client?.end().catch(() => undefined);
  }
}
