import { Logger } from '@nestjs/common';
import { randomBytes } from 'node:crypto';
import type { ClientConfig, Pool, PoolConfig } from 'pg';
import { LockBackendError, LockConfigError } from '../../errors';
import { DEFAULT_SERVER_TIMEOUT_MS, DEFAULT_TTL_MS } from '../../lock-defaults';
import type { BackendSettings } from '../backend-definition';
import type { AcquireRequest, EntryMode, LockBackend, LockGrant, LockInspection } from '../lock-backend.interface';
import { exclusiveLockDelayOnly } from '../lock-delay-refusals';
import { loadPeer } from '../load-peer';
import { LocalQueueBackend } from '../../queue/local-queue-backend';
import { ServerClock } from '../server-clock';
import { LATE_GRANT_SHARE, PostgresBatch } from './postgres-batch';
import { PostgresCalls } from './postgres-calls';
import { PostgresEntryStatements } from './postgres-entry-statements';
import { PostgresListener } from './postgres-listener';
import { PostgresInspector } from './postgres-inspect';
import { PostgresHolderRecord } from './postgres-holder-record';
import { namesOf, postgresAddress, validatePostgresOptions, type PostgresBackendOptions } from './postgres-options';
import { schemaDdl } from './postgres-schema';
import { PostgresSafetyNet } from './postgres-safety-net';
import { modeStatements } from './postgres-modes-statements';
import { statements, type AcquireRow } from './postgres-statements';

const logger = new Logger('DistributedLock');

/** Free rows older than this are deleted, this often, by each process (best effort: a failure waits for the next sweep). */
const SWEEP_EVERY_MS = 60_000;
/**
 * Processes that start together would race in CREATE ... IF NOT EXISTS (a duplicate catalog row);
 * the schema is created in one implicit transaction, behind this lock.
 */
const CREATE_SCHEMA_LOCK = "SELECT pg_advisory_xact_lock(hashtext('nest-distributed-lock schema'));\n";

/**
 * Locks in PostgreSQL as lease rows, not held connections: one row per held name (owner, fence
 * from a sequence, expiry on the database's clock), a FIFO queue table, and a hand-off in the
 * releasing statement that notifies the next waiter's process on its own channel. A process's
 * callers of one name share queue entries as LocalQueues batches them: write callers one after
 * the other, read callers all at once; a permit caller has an entry of its own. See docs/postgres.md.
 */
export class PostgresLockBackend extends LocalQueueBackend<PostgresBatch> implements LockBackend {
  readonly name = 'postgres';
  readonly modes = ['write', 'read', 'permit'] as const;
  /** The name's row keeps its holder's delay_ms, and grants wait for expires_at + delay_ms (postgres-delay-schema.ts). */
  readonly lockDelay = true;
  lockDelayRefusal(mode: EntryMode): string | undefined {
    return exclusiveLockDelayOnly('postgres', mode);
  }
  readonly maxKeyBytes = 1024;
  readonly address: string;
  /** Names this process's channel and entries: 72 random bits. */
  private readonly clientId = randomBytes(9).toString('hex');
  private readonly calls: PostgresCalls;
  /** Each entry's statements, by its mode. */
  private readonly statements: PostgresEntryStatements;
  private readonly listener: PostgresListener;
  private readonly clock = new ServerClock();
  /** One loss signal for every grant: the backend learns of a lost lease only by asking (renew), except at close. */
  private readonly closing = new AbortController();
  /** Entries being queued or waiting at the server, by entry owner: where a notified grant goes. */
  private readonly entries = new Map<string, PostgresBatch>();
  private readonly safetyNet: PostgresSafetyNet<PostgresBatch>;
  private readonly startupWarning: NodeJS.Timeout;
  private readonly inspector: PostgresInspector;
  private readonly sweeper: NodeJS.Timeout;
  /** This process's holder description in the clients table, for inspect(). */
  private readonly record: PostgresHolderRecord;

  constructor(
    private readonly pool: Pool,
    private readonly ownsPool: boolean,
    listenConfig: ClientConfig,
    address: string,
    options: PostgresBackendOptions,
    settings: BackendSettings,
  ) {
    // The callers of one tick share an entry; a name's first entry goes out in its caller's own call.
    super('postgres', { sendSoon: (send) => process.nextTick(send), sendFirstAtOnce: true });
    this.address = address;
    const names = namesOf(options);
    const sql = statements(names);
    const modeSql = modeStatements(names);
    this.calls = new PostgresCalls(pool, this.address, settings.serverTimeoutMs, options.createSchema === false ? async () => undefined : once(() => pool.query(CREATE_SCHEMA_LOCK + schemaDdl(names)).then(() => undefined)), [
      sql.acquire,
      sql.release,
      sql.renew,
      modeSql.acquire,
      modeSql.release,
      modeSql.renew,
    ]);
    const channel = `lock_${this.clientId}`;
    this.statements = new PostgresEntryStatements(this.calls, sql, modeSql, channel);
    this.record = new PostgresHolderRecord(this.calls, names, this.clientId, settings.holderDescription);
    this.inspector = new PostgresInspector(this.calls, names, () => this.record.tablePresent());
    this.safetyNet = new PostgresSafetyNet<PostgresBatch>(
      (batches) => this.statements.check(batches),
      this.clock,
      () => this.waitingEntries(),
      {
        granted: (batch, fence, leaseEndsAfter) => this.granted(batch, fence, leaseEndsAfter - batch.ttlMs),
        left: (batch) => void this.letGo(batch),
      },
    );
    const { Client } = loadPeer<typeof import('pg')>('pg', 'postgres');
    this.listener = new PostgresListener(Client, { ...listenConfig, keepAlive: true, connectionTimeoutMillis: settings.serverTimeoutMs }, channel, {
      notified: (payload) => this.notified(payload),
      resumed: () => this.safetyNet.checkNow(),
      failed: (error) => this.calls.failed(error),
    });
    this.startupWarning = setTimeout(() => {
      if (this.listener.isListening || !this.lifecycle.isOpen) return;
      const why = this.calls.unreachable();
      logger.warn(
        `The postgres server at ${this.address} could not be reached within ${settings.serverTimeoutMs} ms of startup` +
          `${why ? ` (${why.message})` : ''}; lock calls fail with LockServerUnreachableError until it can be. Connecting goes on in the background.`,
      );
    }, settings.serverTimeoutMs);
    this.startupWarning.unref();
    this.sweeper = setInterval(() => this.statements.sweep(SWEEP_EVERY_MS), SWEEP_EVERY_MS);
    this.sweeper.unref();
    this.record.start();
  }

  unreachable(): Error | undefined {
    return this.calls.unreachable();
  }

  /** Asks the database, never this process's queues: see postgres-inspect.ts. */
  inspect(key: string): Promise<LockInspection> {
    return this.inspector.inspect(key);
  }

  forceRelease(key: string): Promise<boolean> {
    return this.inspector.forceRelease(key);
  }

  /** `SELECT 1` on a pooled connection, bounded and retried as every statement is (PostgresCalls.query). */
  async ping(): Promise<void> {
    this.lifecycle.assertOpen();
    await this.calls.query('answer a ping', 'SELECT 1', []);
  }

  /** One statement: take the lock if the entry may go now (for a write: the name is free and nobody waits). */
  protected async tryTake(request: Omit<AcquireRequest, 'signal'>): Promise<LockGrant | null> {
    const batch = new PostgresBatch(request.key, `~t${(trySeq++).toString(36)}`, this.clientId);
    batch.mode = request.mode ?? 'write';
    batch.limit = request.limit;
    batch.lockDelayMs = request.lockDelayMs ?? 0;
    batch.ttlMs = Math.ceil(request.ttlMs);
    const sentAt = performance.now();
    let row: AcquireRow;
    try {
      row = await this.statements.put(batch, false);
    } catch (error) {
      // It may still have run (an answer that came too late): take back what it took.
      if (!(error instanceof LockConfigError)) void this.letGo(batch);
      throw error;
    }
    this.clock.sample(row.server_ms, sentAt);
    if (row.granted_fence === null) return null;
    this.leaseFrom(batch, sentAt + row.left_ms - batch.ttlMs, batch.ttlMs);
    this.queues.adopt(batch, BigInt(row.granted_fence), request);
    return this.grant(batch, request);
  }

  /**
   * One owner- and fence-checked statement on the entry's row: false when the lease is no longer
   * ours. A lost entry is lost for every holder of its batch: their renewals answer false too.
   */
  async renew(grant: LockGrant, ttlMs: number): Promise<boolean> {
    const held = this.heldFor(grant);
    if (!held || held.batch.lost) return false;
    if (await this.renewRow(held.batch, Math.ceil(this.entryTtl(held.batch, grant.owner, ttlMs)), 'renew a lock')) {
      held.ttlMs = ttlMs;
      return true;
    }
    this.held.delete(grant.owner);
    this.entryLost(held.batch, 'renew a lock');
    return false;
  }

  /**
   * The ttl to renew the entry's lease for, for `owner` asking `ttlMs`: a read entry's lease is
   * every holder's of its batch, so it is renewed for the longest ttl among them (never shorter
   * than a lease another holder counts on); other entries have a single holder.
   */
  private entryTtl(batch: PostgresBatch, owner: string, ttlMs: number): number {
    if (batch.mode !== 'read') return ttlMs;
    let longest = ttlMs;
    for (const other of batch.holders) if (other !== owner) longest = Math.max(longest, this.held.get(other)?.ttlMs ?? 0);
    return longest;
  }

  async close(): Promise<void> {
    if (!this.lifecycle.beginClose()) return;
    clearTimeout(this.startupWarning);
    clearInterval(this.sweeper);
    // Entries on their way or waiting, and held ones: all let go below, and awaited.
    const entries = new Set(this.entries.values());
    for (const held of this.held.values()) entries.add(held.batch);
    this.queues.closeAll(this.lifecycle.closedWhileWaiting());
    this.closing.abort(this.lifecycle.closedWhileHeld());
    const releases = [...entries].map((batch) => this.letGo(batch)).concat(this.record.remove());
    this.held.clear();
    this.safetyNet.stop();
    this.listener.close();
    // Best effort, and never long: with the server unreachable the leases expire on their own.
    await Promise.race([Promise.all(releases), new Promise((resolve) => setTimeout(resolve, 2_000).unref())]);
    this.calls.close();
    if (this.ownsPool) await this.pool.end().catch(() => undefined);
  }

  /** BatchEntries: one statement takes the lock, or queues the batch's entry behind the others. */
  send(batch: PostgresBatch): void {
    this.entries.set(batch.entry, batch);
    this.enqueue(batch);
  }

  /** Also the way back into the queue for an entry whose late grant had already been taken over. */
  private enqueue(batch: PostgresBatch): void {
    const sentAt = performance.now();
    batch.askedAt = sentAt;
    batch.refreshedAt = sentAt;
    const listening = this.listener.generation;
    this.statements.put(batch, true).then(
      (row) => {
        this.clock.sample(row.server_ms, sentAt);
        // Everyone left (or the backend closed) while the statement was on its way: leave the queue.
        if (batch.state === 'ended') return void this.letGo(batch);
        if (row.granted_fence !== null) {
          this.granted(batch, BigInt(row.granted_fence), sentAt + row.left_ms - batch.ttlMs);
          return this.queues.sent(batch, false);
        }
        this.queues.sent(batch, true);
        batch.holderEndsAt = performance.now() + row.left_ms;
        const early = batch.earlyGrant;
        batch.earlyGrant = undefined;
        if (early) this.granted(batch, early.fence, Math.max(batch.askedAt, this.clock.earliestLocal(early.serverMs)));
        // Queued before this LISTEN was in place: a grant notified meanwhile was lost, and the check
        // that LISTEN's resumption ran did not cover this entry yet (it was still being sent).
        // (Not listening now: LISTEN's resumption checks this entry, queued by then.)
        else if (this.listener.generation !== undefined && listening !== this.listener.generation) this.safetyNet.checkNow();
        else this.safetyNet.schedule();
      },
      (error) => {
        this.queues.end(batch, error);
        // A permit of another limit than the name's: nothing was done at the server.
        if (!(error instanceof LockConfigError)) void this.letGo(batch);
      },
    );
  }

  /**
   * BatchEntries: the callers left or the backend closes (which lets go of the entry itself). A
   * statement still on its way leaves the queue when answered (enqueue).
   */
  withdraw(batch: PostgresBatch, reason: unknown): void {
    const queued = batch.state === 'queued';
    this.queues.end(batch, reason);
    if (queued && this.lifecycle.isOpen) void this.letGo(batch);
  }

  /** BatchEntries: the release statement hands the lock to the next live entries, or frees the name. */
  remove(batch: PostgresBatch): Promise<void> {
    this.entries.delete(batch.entry);
    // The statement's answer (whom the lock was handed to) is of no use here.
    return this.statements.release(batch) as Promise<void>;
  }

  /** BatchEntries: the previous holder let go without knowing its lease valid: renew the entry's row. */
  async confirm(batch: PostgresBatch): Promise<true | Error> {
    try {
      if (await this.renewRow(batch, batch.ttlMs, 'keep a lock for the next caller')) return true;
    } catch (error) {
      void this.letGo(batch);
      return error as Error;
    }
    batch.lost = true;
    return this.leaseGone('keep a lock for the next caller');
  }

  usable(batch: PostgresBatch): boolean {
    return !batch.lost;
  }

  /**
   * BatchEntries: the grant of a caller served under the batch's entry. Its lease never counts
   * past the entry's lease at the server; when too little of that is left for the caller's first
   * renewal, the row is renewed now (see entryTtl) and the caller holds under the old lease until then.
   */
  grant(batch: PostgresBatch, { key, owner, ttlMs }: Pick<AcquireRequest, 'key' | 'owner' | 'ttlMs'>): LockGrant {
    const now = performance.now();
    const requestedAt = Math.min(now, batch.leaseFrom + batch.leaseTtlMs - ttlMs);
    let provisional: LockGrant['provisional'];
    if (requestedAt + ttlMs - now < (ttlMs * 2) / 3) {
      const sentAt = now;
      const recorded = this.renewRow(batch, Math.ceil(this.entryTtl(batch, owner, ttlMs)), 'renew a lock').then(
        (renewed) => (renewed ? sentAt : undefined),
        () => new Promise<undefined>(() => undefined), // could not tell: the lease's own renewals go on
      );
      provisional = { validUntil: batch.leaseFrom + batch.leaseTtlMs, recorded };
    }
    const grant: LockGrant = { key, owner, fencingToken: batch.token(), lost: this.closing.signal, requestedAt, provisional };
    this.held.set(owner, { grant, batch, ttlMs });
    return grant;
  }

  /** A grant pushed by the releasing statement: `<entry> <fence> <server ms at the grant>`. */
  private notified(payload: string): void {
    const [entry, fence, serverMs] = payload.split(' ');
    const batch = this.entries.get(entry);
    if (!batch || !/^\d+$/.test(fence ?? '')) return; // an entry that left: its release statement hands the lock on
    if (batch.state === 'sending') batch.earlyGrant = { fence: BigInt(fence), serverMs: Number(serverMs) };
    else if (batch.state === 'queued') this.granted(batch, BigInt(fence), Math.max(batch.askedAt, this.clock.earliestLocal(Number(serverMs))));
  }

  /**
   * The entry holds the lock, with a lease that began no earlier than `requestedAt`. A grant that
   * came so late that little of its lease is left is confirmed first; one that ran out meanwhile
   * (taken over by the next waiter) queues again at the tail.
   */
  private granted(batch: PostgresBatch, fence: bigint, requestedAt: number): void {
    if (batch.state === 'ended' || batch.state === 'holding' || batch.confirming) return;
    const ttlMs = batch.ttlMs;
    if (requestedAt + ttlMs - performance.now() >= ttlMs * LATE_GRANT_SHARE) {
      this.entries.delete(batch.entry);
      this.leaseFrom(batch, requestedAt, ttlMs);
      return this.queues.holds(batch, fence);
    }
    batch.confirming = true;
    batch.entryToken = fence;
    this.renewRow(batch, ttlMs, 'confirm a late grant of a lock').then(
      (renewed) => {
        batch.confirming = false;
        if (batch.state === 'ended') return void this.letGo(batch);
        if (!renewed) return this.enqueue(batch);
        this.entries.delete(batch.entry);
        this.queues.holds(batch, fence);
      },
      (error) => {
        batch.confirming = false;
        this.queues.end(batch, error);
        void this.letGo(batch);
      },
    );
  }

  /** The entry's row, owner- and fence-checked, extended to `ttlMs` from now; false when it is not ours. */
  private async renewRow(batch: PostgresBatch, ttlMs: number, operation: string): Promise<boolean> {
    const sentAt = performance.now();
    const serverMs = await this.statements.renew(batch, ttlMs, operation);
    if (serverMs === undefined) return false;
    this.clock.sample(serverMs, sentAt);
    this.leaseFrom(batch, sentAt, ttlMs);
    return true;
  }

  private leaseFrom(batch: PostgresBatch, from: number, ttlMs: number): void {
    batch.leaseFrom = from;
    batch.leaseTtlMs = ttlMs;
  }

  /** Leaves the queue, or lets go of the lock, owner-checked: best effort, the lease or the entry's liveness ends it otherwise. */
  private letGo(batch: PostgresBatch): Promise<void> {
    this.entries.delete(batch.entry);
    return this.statements.release(batch).then(
      () => undefined,
      () => undefined,
    );
  }

  /** The entries waiting at the server, for the safety net. */
  private *waitingEntries(): Iterable<PostgresBatch> {
    for (const batch of this.entries.values()) if (batch.state === 'queued' && !batch.confirming) yield batch;
  }

  private entryLost(batch: PostgresBatch, operation: string): void {
    batch.lost = true;
    this.queues.end(batch, this.leaseGone(operation));
  }

  private leaseGone(operation: string): LockBackendError {
    return new LockBackendError('postgres', operation, new Error('the lease row is gone: it expired and another holder took the lock, or an operator removed it'), this.address);
  }

  protected newBatch(name: string, id: string): PostgresBatch {
    return new PostgresBatch(name, id, this.clientId);
  }
}

let trySeq = 0;

function once(run: () => Promise<void>): () => Promise<void> {
  let running: Promise<void> | undefined;
  return () => {
    // A failure (the server was down) is tried again by the next statement.
    running ??= run().catch((error) => {
      running = undefined;
      throw error;
    });
    return running;
  };
}

/**
 * Builds the backend for `{ type: 'postgres', ... }`, loading pg only now (an optional peer).
 * Never waits for the server: the LISTEN connection opens in the background and the schema is
 * created by the first statement.
 */
export function createPostgresBackend(options: PostgresBackendOptions, settings: BackendSettings = { ttlMs: DEFAULT_TTL_MS, serverTimeoutMs: DEFAULT_SERVER_TIMEOUT_MS }): PostgresLockBackend {
  validatePostgresOptions(options);
  const { Pool } = loadPeer<typeof import('pg')>('pg', 'postgres');
  if (options.pool) {
    const poolSettings = ((options.pool as { options?: PoolConfig }).options ?? {}) as ClientConfig;
    const listenConfig = options.listenUrl ? { connectionString: options.listenUrl } : poolSettings;
    return new PostgresLockBackend(options.pool as unknown as Pool, false, listenConfig, postgresAddress(poolSettings), options, settings);
  }
  const pool = new Pool({
    connectionString: options.url,
    connectionTimeoutMillis: settings.serverTimeoutMs,
    // pg destroys a connection whose statement went unanswered, so a black-holed one is not reused.
    query_timeout: settings.serverTimeoutMs + 100,
    keepAlive: true,
    application_name: 'nest-distributed-lock',
  });
  // An idle pooled connection that dies (pg_terminate_backend, a restart) is dropped by the pool; never an unhandled error.
  pool.on('error', () => undefined);
  const listenConfig = { connectionString: options.listenUrl ?? options.url, application_name: 'nest-distributed-lock-listen' };
  return new PostgresLockBackend(pool, true, listenConfig, postgresAddress({ connectionString: options.url }), options, settings);
}
