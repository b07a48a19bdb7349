import { LockConfigError } from '../../errors';
import type { PostgresBatch } from './postgres-batch';
import type { PostgresCalls } from './postgres-calls';
import { StatementCoalescer } from './postgres-coalescer';
import type { ModeAcquireRow, ModeStatements } from './postgres-modes-statements';
import { acquireValues, queueManyValues, type AcquireRow, type CheckRow, type Statements } from './postgres-statements';

/**
 * The statements of a batch's entry, by the entry's kind: a write entry owns the name's row
 * (postgres-statements.ts), a read or permit entry is a row of the holders table
 * (postgres-modes-statements.ts). Write entries queued or released by many callers at once share
 * a statement (a burst of distinct names); read and permit entries go one statement each.
 */
export class PostgresEntryStatements {
  private readonly queueing: StatementCoalescer<PostgresBatch, AcquireRow>;
  private readonly releasing: StatementCoalescer<PostgresBatch, unknown>;

  constructor(
    private readonly calls: PostgresCalls,
    private readonly sql: Statements,
    private readonly modeSql: ModeStatements,
    /** The process's LISTEN channel, on which a grant of a queued entry is notified. */
    private readonly channel: string,
  ) {
    // A lone row goes as the plain statement: arrays and unnest cost the server more than the call itself.
    this.queueing = new StatementCoalescer(
      (batch) => this.calls.queryOne<AcquireRow>('queue for a lock', this.sql.acquire, acquireValues(batch, this.channel, true)),
      (batches) => byName(batches, (sorted) => this.calls.query<AcquireRow>('queue for a lock', this.sql.queueMany, queueManyValues(sorted, this.channel))),
    );
    this.releasing = new StatementCoalescer(
      (batch) => this.calls.queryOne('release a lock', this.sql.release, [batch.key, batch.entry]),
      (batches) => byName(batches, (sorted) => this.calls.query('release a lock', this.sql.releaseMany, [sorted.map((batch) => batch.key), sorted.map((batch) => batch.entry)])),
    );
  }

  /**
   * Takes the lock for the batch's entry if it may go now, else queues the entry at the tail
   * (a try never queues). A permit of another limit than the name's is rejected with
   * LockConfigError, and nothing was done at the server.
   */
  put(batch: PostgresBatch, queue: boolean): Promise<AcquireRow> {
    if (batch.mode === 'write') {
      if (queue) return this.queueing.run(batch);
      return this.calls.queryOne<AcquireRow>('take a lock', this.sql.acquire, acquireValues(batch, this.channel, false));
    }
    const values = [batch.key, batch.entry, this.channel, batch.mode, batch.limit ?? null, batch.ttlMs, batch.aliveMs, queue];
    return this.calls.queryOne<ModeAcquireRow>(queue ? 'queue for a lock' : 'take a lock', this.modeSql.acquire, values).then((row) => {
      if (row.other_limit !== null) throw limitError(batch, row.other_limit);
      return row;
    });
  }

  /** Lets go of the entry, held or queued, owner-checked: the statement grants whoever its leaving lets go. */
  release(batch: PostgresBatch): Promise<unknown> {
    if (batch.mode === 'write') return this.releasing.run(batch);
    return this.calls.query('release a lock', this.modeSql.release, [batch.key, batch.entry]);
  }

  /** Extends the entry's running lease to `ttlMs` from now, owner- and fence-checked: the server's time, or undefined when it is not ours. */
  async renew(batch: PostgresBatch, ttlMs: number, operation: string): Promise<number | undefined> {
    const values = [batch.key, batch.entry, ttlMs, batch.entryToken!.toString()];
    const [row] = await this.calls.query<{ server_ms: number | null }>(operation, batch.mode === 'write' ? this.sql.renew : this.modeSql.renew, values);
    return row?.server_ms ?? undefined;
  }

  /**
   * The safety net's check of the waiting entries (sorted by name), a row each in their order:
   * one statement for the write entries, one for the others (each keeps the names' order, so two
   * processes still lock rows in one order).
   */
  async check(batches: PostgresBatch[]): Promise<CheckRow[]> {
    const writes = batches.filter((batch) => batch.mode === 'write');
    const others = batches.filter((batch) => batch.mode !== 'write');
    const [writeRows, otherRows] = await Promise.all([
      writes.length === 0
        ? []
        : this.calls.query<CheckRow>('check the queue', this.sql.check, [
            writes.map((batch) => batch.key),
            writes.map((batch) => batch.entry),
            writes.map((batch) => batch.ttlMs),
            writes.map((batch) => batch.aliveMs),
            this.channel,
            writes.map((batch) => Math.ceil(batch.lockDelayMs)),
          ]),
      others.length === 0
        ? []
        : this.calls.query<CheckRow>('check the queue', this.modeSql.check, [
            others.map((batch) => batch.key),
            others.map((batch) => batch.entry),
            others.map((batch) => batch.mode),
            others.map((batch) => batch.limit ?? null),
            others.map((batch) => batch.ttlMs),
            others.map((batch) => batch.aliveMs),
            this.channel,
          ]),
    ]);
    let w = 0;
    let o = 0;
    return batches.map((batch) => (batch.mode === 'write' ? writeRows[w++] : otherRows[o++]));
  }

  /** Deletes free lock rows and ended holder rows older than `ms` (best effort: a failure waits for the next sweep). */
  sweep(ms: number): void {
    void this.calls.query('sweep free lock rows', this.sql.sweep, [ms]).catch(() => undefined);
    void this.calls.query('sweep ended shared leases', this.modeSql.sweep, [ms]).catch(() => undefined);
  }
}

function limitError(batch: PostgresBatch, otherLimit: number): LockConfigError {
  return new LockConfigError(
    'limit',
    `the semaphore "${batch.key}" is held or awaited with limit ${otherLimit}, and this permit asks for limit ${batch.limit}: every permit of a key must use one limit.`,
  );
}

/**
 * Runs a statement over the batches sorted by name, so that two processes' statements lock the
 * names' rows in one order (no deadlock), and answers in the batches' own order.
 */
async function byName<Output>(batches: PostgresBatch[], run: (sorted: PostgresBatch[]) => Promise<Output[]>): Promise<Output[]> {
  const order = batches.map((_, i) => i).sort((a, b) => (batches[a].key < batches[b].key ? -1 : batches[a].key > batches[b].key ? 1 : a - b));
  const outputs = await run(order.map((i) => batches[i]));
  const answers = new Array<Output>(batches.length);
  order.forEach((i, k) => (answers[i] = outputs[k]));
  return answers;
}
