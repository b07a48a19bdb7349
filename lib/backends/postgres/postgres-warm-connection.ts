import type { PgPoolLike } from './postgres-options';

/** A statement as PostgresCalls sends it: named (prepared per connection), or plain text with values. */
export type Statement = { name: string; text: string; values: unknown[] } | { text: string; values: unknown[] };

/** What a pooled connection (pg's PoolClient) offers that this file uses. */
interface PooledConnection {
  query(text: string, values: unknown[]): Promise<unknown>;
  query(config: { name: string; text: string; values: unknown[] }): Promise<unknown>;
  /** Back to the pool; with an error, the pool closes the connection instead. */
  release(error?: Error): void;
  on(event: 'error', listener: (error: Error) => void): unknown;
  removeListener(event: 'error', listener: (error: Error) => void): unknown;
}

/**
 * One pooled connection kept checked out while the backend's statements come back to back (a
 * lock's take, its release, the next lock's take), and given back to the pool as soon as the
 * event loop turns with no statement on it, or at once when someone waits for a connection.
 * pg-pool hands out an idle connection only after a process.nextTick, so a statement sent with
 * pool.query is written after every promise reaction of its turn; on a kept connection it is
 * written at once, and the rest of the lock's bookkeeping runs while the server works. A busy
 * connection leaves the statement to the pool, as does a pool that does not say who waits.
 */
export class WarmConnection {
  private connection?: PooledConnection;
  private busy = false;
  private checkingOut = false;
  private giveBackScheduled = false;
  private closed = false;

  constructor(private readonly pool: PgPoolLike) {}

  /** The statement on the kept connection when it is free, else through the pool. Never throws. */
  query(statement: Statement): Promise<unknown> {
    try {
      const connection = this.connection;
      if (connection && !this.busy) return this.send(connection, statement);
      if (!connection && !this.checkingOut && !this.closed && typeof this.pool.waitingCount === 'number') return this.checkOut(statement);
      return 'name' in statement ? this.pool.query(statement) : this.pool.query(statement.text, statement.values);
    } catch (error) {
      return Promise.reject(error);
    }
  }

  /** No more keeping: the connection goes back now, or once its statement is answered. */
  close(): void {
    this.closed = true;
    if (!this.busy) this.giveBack();
  }

  private checkOut(statement: Statement): Promise<unknown> {
    this.checkingOut = true;
    return this.pool.connect().then(
      (checkedOut) => {
        this.checkingOut = false;
        const connection = checkedOut as PooledConnection;
        connection.on('error', this.failedWhileKept);
        this.connection = connection;
        return this.send(connection, statement);
      },
      (error: unknown) => {
        this.checkingOut = false;
        throw error;
      },
    );
  }

  private send(connection: PooledConnection, statement: Statement): Promise<unknown> {
    this.busy = true;
    const answer = 'name' in statement ? connection.query(statement) : connection.query(statement.text, statement.values);
    answer.then(this.answered, (error: unknown) => this.failed(connection, error));
    return answer;
  }

  private readonly answered = (): void => {
    this.busy = false;
    // Never ahead of anyone the pool keeps waiting: it hands them this connection now.
    if (this.closed || (this.pool.waitingCount ?? 0) > 0) return this.giveBack();
    if (this.giveBackScheduled) return;
    this.giveBackScheduled = true;
    setImmediate(this.giveBackIfIdle);
  };

  private readonly giveBackIfIdle = (): void => {
    this.giveBackScheduled = false;
    if (!this.busy) this.giveBack();
  };

  /** A statement failed on the kept connection: the pool closes it, as pool.query does after any error. */
  private failed(connection: PooledConnection, error: unknown): void {
    if (this.connection !== connection) return;
    this.busy = false;
    this.giveBack(error instanceof Error ? error : new Error(String(error)));
  }

  /** The kept connection broke between statements (the server closed it): closed, not given back for reuse. */
  private readonly failedWhileKept = (error: Error): void => {
    if (!this.busy) this.giveBack(error);
  };

  private giveBack(error?: Error): void {
    const connection = this.connection;
    if (!connection) return;
    this.connection = undefined;
    connection.removeListener('error', this.failedWhileKept);
    connection.release(error);
  }
}
