import { createHash } from 'node:crypto';
import { LockBackendError, LockServerUnreachableError } from '../../errors';
import { deadlines } from '../../deadlines';
import { BoundedCalls, type Settle } from '../bounded-calls';
import type { PgPoolLike } from './postgres-options';
import { WarmConnection } from './postgres-warm-connection';

/**
 * Statements of one backend at PostgreSQL at once: a burst of a thousand callers of distinct
 * names queues here rather than in the pool, so that a statement's serverTimeoutMs counts from
 * when it is sent, not from when a pooled connection came free.
 */
export const MAX_IN_FLIGHT = 10;

/** Pauses between the attempts of a statement that met a dropped connection. */
const RETRY_MIN_MS = 25;
const RETRY_MAX_MS = 200;

/** SQLSTATE classes and codes, and pg/Node errors, that mean the server could not be reached or went away. */
const TRANSPORT_CODES = /^(08|57P0[123]|53300|ECONNREFUSED|ECONNRESET|ETIMEDOUT|EPIPE|EHOSTUNREACH|ENETUNREACH|ENOTFOUND|EAI_AGAIN)/;
const TRANSPORT_MESSAGES = /Connection terminated|timeout exceeded when trying to connect|Query read timeout|Connection ended|connect ECONN|not queryable/i;

/**
 * A named prepared statement the connection does not have (26000), or has from someone else
 * (42P05): a pooler in transaction mode (PgBouncer before 1.21, or without
 * max_prepared_statements) hands each statement to any server connection. Nothing ran.
 */
const PREPARED_STATEMENT_CODES = new Set(['26000', '42P05']);

/** The schema is missing (createSchema: false, and the DDL was not run): say what to do. */
const MISSING_SCHEMA = new Set(['42P01', '42883', '3F000']);

/** What the backend needs of a query result. */
export interface Rows<Row> {
  rows: Row[];
}

/**
 * Every statement of one backend, through BoundedCalls (bounded in flight, wrapped once with pg's
 * error as `cause`), bounded in time by serverTimeoutMs from when it is sent. Also answers
 * `unreachable()` from what the newest calls saw.
 */
export class PostgresCalls extends BoundedCalls {
  /**
   * The hot statements' names, by text: prepared once per connection, so the server parses and
   * plans them once. Dropped for good (unnamed statements, as every other) the first time the
   * server does not know a name: behind a pooler in transaction mode.
   */
  private preparedNames?: Map<string, string>;
  /** `prepare` succeeded: statements no longer wait for it. */
  private prepared = false;
  /** Statements go on it while they come back to back, else through the pool. */
  private readonly connection: WarmConnection;

  constructor(
    pool: PgPoolLike,
    address: string,
    private readonly serverTimeoutMs: number,
    /** Runs before the first statement (creating the schema); a failure fails that statement, and the next one tries again. */
    private readonly prepare: () => Promise<void>,
    prepared: readonly string[] = [],
  ) {
    super('postgres', 'PostgreSQL', address, MAX_IN_FLIGHT, Math.min(serverTimeoutMs / 4, 250));
    this.connection = new WarmConnection(pool);
    if (prepared.length > 0) this.preparedNames = new Map(prepared.map((text) => [text, `ndl_${createHash('sha1').update(text).digest('hex').slice(0, 20)}`]));
  }

  protected isTransportError(error: unknown): boolean {
    if (!(error instanceof Error)) return false;
    const code = (error as { code?: unknown }).code;
    return (typeof code === 'string' && TRANSPORT_CODES.test(code)) || TRANSPORT_MESSAGES.test(error.message);
  }

  /** One statement; `operation` is what errors say the backend failed to do ("take a lock"). */
  query<Row>(operation: string, text: string, values: unknown[]): Promise<Row[]> {
    return this.boundedSettling(operation, (settle) => this.withRetries<Row, Row[]>(text, values, allRows, settle));
  }

  /** A statement that always answers exactly one row (take or queue, release): that row. */
  queryOne<Row>(operation: string, text: string, values: unknown[]): Promise<Row> {
    return this.boundedSettling(operation, (settle) => this.withRetries<Row, Row>(text, values, firstRow, settle));
  }

  /**
   * Every statement of the backend is idempotent for its owner (take or queue, release, renew):
   * one that failed on a connection the server dropped (a restart, pg_terminate_backend, "the
   * database system is starting up") is sent again on another, within serverTimeoutMs in all.
   * One deadline on the shared scheduler bounds all the attempts: a Node timer per statement, of
   * a different length each time, cost more than the rest of this path. Settles the call's slot
   * itself (boundedSettling): its promise is the caller's.
   */
  private withRetries<Row, Answer>(text: string, values: unknown[], answer: (rows: Row[]) => Answer, settle: Settle): Promise<Answer> {
    const sentAt = performance.now();
    return new Promise<Answer>((resolve, reject) => {
      let settled = false;
      const deadline = deadlines.add(sentAt + this.serverTimeoutMs, () => {
        settled = true;
        reject(settle.failed(new Error(`no answer within ${this.serverTimeoutMs} ms`)));
      });
      const answered = (result: Rows<Row>) => {
        if (settled) return;
        settled = true;
        deadlines.cancel(deadline);
        settle.answered();
        resolve(answer(result.rows));
      };
      const failed = (error: unknown, attempt: number) => {
        if (settled) return;
        if (this.preparedNames && PREPARED_STATEMENT_CODES.has((error as { code?: string }).code ?? '')) {
          // Nothing ran: behind a pooler in transaction mode, from now on as unnamed statements.
          this.preparedNames = undefined;
          return void this.statement<Row>(text, values).then(answered, (next: unknown) => failed(next, attempt));
        }
        const pauseMs = Math.min(RETRY_MIN_MS * 2 ** attempt, RETRY_MAX_MS);
        if (!this.isTransportError(error) || performance.now() + pauseMs >= sentAt + this.serverTimeoutMs) {
          settled = true;
          deadlines.cancel(deadline);
          return reject(settle.failed(error));
        }
        this.failed(error);
        setTimeout(() => {
          if (!settled) this.statement<Row>(text, values).then(answered, (next: unknown) => failed(next, attempt + 1));
        }, pauseMs);
      };
      this.statement<Row>(text, values).then(answered, (error: unknown) => failed(error, 0));
    });
  }

  /** The statement once the schema is in place, as a named prepared statement while the server keeps those. Never throws. */
  private statement<Row>(text: string, values: unknown[]): Promise<Rows<Row>> {
    try {
      if (!this.prepared) {
        return this.prepare().then(() => {
          this.prepared = true;
          return this.statement<Row>(text, values);
        });
      }
      const name = this.preparedNames?.get(text);
      return this.connection.query(name === undefined ? { text, values } : { name, text, values }) as Promise<Rows<Row>>;
    } catch (error) {
      return Promise.reject(error);
    }
  }

  /** The backend closes: the connection kept between statements goes back to the pool. */
  close(): void {
    this.connection.close();
  }

  /** No answer within our own bound (withRetries) is the server not answering too; a missing schema says what to do. */
  protected override otherError(operation: string, error: unknown, waitedMs: number): LockBackendError {
    if (error instanceof Error && error.message.startsWith('no answer within')) {
      return new LockServerUnreachableError('postgres', operation, this.address, waitedMs, this.unreachable() ?? error);
    }
    const code = (error as { code?: string }).code;
    if (code && MISSING_SCHEMA.has(code)) {
      const hint = new Error(`${(error as Error).message}: the lock tables are missing; run sql/postgres-locks.sql (postgresLockSchemaSql()) or set backend.createSchema to true`);
      return new LockBackendError('postgres', operation, hint, this.address);
    }
    return new LockBackendError('postgres', operation, error, this.address);
  }
}

function allRows<Row>(rows: Row[]): Row[] {
  return rows;
}

function firstRow<Row>(rows: Row[]): Row {
  return rows[0];
}
