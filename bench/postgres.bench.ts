import { setTimeout as sleep } from 'node:timers/promises';
import { Client, Pool, type PoolClient } from 'pg';
import type { LockService } from '../lib';
import { createBackend } from '../lib/backends/registry';
import { DEFAULT_NAMES, sqlNames } from '../lib/backends/postgres/postgres-names';
import { schemaDdl } from '../lib/backends/postgres/postgres-schema';
import { acquireValues, DURABLE_CHECK, DURABLE_CTE, queueManyValues, statements, type WriteEntry } from '../lib/backends/postgres/postgres-statements';
import { runSql, startPostgresServer } from '../servers/postgres-server';
import { leanLeaseRowLock } from './lean-lease-row-lock';
import { lockServiceOver } from './lock-services';
import { printFlashSale } from './report';
import { formatRatio, median, pairedTimeRatio } from './stats';
import { flashSale, interleavedCycles, medianFlashSale, type FlashSaleResult, type LockRunner, SALE_BUYERS_PER_CONNECTION, SALE_CONNECTIONS, SALE_STOCK } from './workloads';
import { recordFigure, recordTarget } from './summary';

const CYCLE_ROUNDS = 15;
const CYCLES_PER_ROUND = 200;
const SALE_REPEATS = 3;
const LEASE_MS = 10_000;
/** A write entry of the bench's own statements: the lease above, alive for a minute, no lock-delay. */
const benchEntry = (key: string, entry: string): WriteEntry => ({ key, entry, ttlMs: LEASE_MS, aliveMs: 60_000, lockDelayMs: 0 });
const WAIT_MS = 60_000;
const POLL_MS = 10;
const QUEUE_LENGTHS = [10, 100, 1000];
/** How long the holder holds in the statements-per-hand-off measure: pollers poll meanwhile. */
const HOLD_MS = 100;

interface Contender {
  label: string;
  runners: LockRunner[];
}

/**
 * This backend against session advisory locks (`pg_advisory_lock` on a connection held for the
 * whole wait and hold, as the `advisory-lock` package does) and a polling lease-row lock (try
 * the row, sleep 10 ms, retry: what ShedLock-style code does), on one throwaway PostgreSQL 15.
 */
export async function run(): Promise<void> {
  const postgres = await startPostgresServer(['-c', 'shared_preload_libraries=pg_stat_statements', '-c', 'pg_stat_statements.track=top']);
  const services: LockService[] = [];
  const pools: Pool[] = [];
  const newPool = (max: number) => {
    const pool = new Pool({ connectionString: postgres.url, max });
    pool.on('error', () => undefined);
    pools.push(pool);
    return pool;
  };
  try {
    await runSql(postgres.url, 'CREATE EXTENSION IF NOT EXISTS pg_stat_statements');
    await runSql(postgres.url, schemaDdl(DEFAULT_NAMES));
    await runSql(postgres.url, 'CREATE TABLE IF NOT EXISTS poll_locks (name text PRIMARY KEY, owner text NOT NULL, expires_at timestamptz NOT NULL)');
    for (let i = 0; i < SALE_CONNECTIONS; i++) services.push(lockServiceOver(await createBackend({ type: 'postgres', url: postgres.url })));
    const advisoryPools = Array.from({ length: SALE_CONNECTIONS }, () => newPool(SALE_BUYERS_PER_CONNECTION));
    const contenders: Contender[] = [
      {
        label: 'this library (postgres)',
        runners: services.map((service): LockRunner => (name, section) => service.withLock(name, section, { waitTimeoutMs: WAIT_MS, ttlMs: LEASE_MS })),
      },
      // One connection per waiter and holder: a session lock is the connection's; 50 buyers need 50.
      { label: 'session advisory lock (pg_advisory_lock, dedicated connection)', runners: advisoryPools.map(advisoryRunner) },
      { label: `polling lease row (try, sleep ${POLL_MS} ms, retry)`, runners: Array.from({ length: SALE_CONNECTIONS }, () => pollingRunner(newPool(10))) },
    ];
    // What no lease-row lock can beat: this library's own two statements sent with no library
    // around them, and two bare single-row UPDATEs; with the advisory lock again beside them, all
    // three on one connection of their own (uncontended rounds only). One server process for the
    // three: how Linux places a connection's server process on this machine's two vCPUs moves its
    // round trip by up to 2x, and a process that only ever takes advisory locks is placed
    // differently from one that commits writes (see BENCHMARKS.md).
    await runSql(postgres.url, 'CREATE TABLE IF NOT EXISTS bare_rows (name text PRIMARY KEY, owner text) WITH (fillfactor = 50)');
    const floorPool = newPool(1);
    const advisoryShared: Contender = { label: "session advisory lock, on the floors' connection (which also commits writes)", runners: [advisoryRunner(floorPool)] };
    const floor: Contender = { label: "floor: this library's take and release statements alone (no library)", runners: [leaseRowFloor(floorPool)] };
    const bareRow: Contender = { label: 'floor of any lease-row lock: UPDATE one row to set its owner, then to clear it (durable commits as the library makes them)', runners: [bareRowFloor(floorPool)] };
    // The library again, its statements on that same connection (backend.pool): against its
    // statements alone, only the library's own work differs, not where the server runs them.
    const sharedService = lockServiceOver(await createBackend({ type: 'postgres', pool: floorPool, listenUrl: postgres.url }));
    services.push(sharedService);
    const oursShared: Contender = {
      label: "this library, on the floors' connection (backend.pool)",
      runners: [(name, section) => sharedService.withLock(name, section, { waitTimeoutMs: WAIT_MS, ttlMs: LEASE_MS })],
    };
    // How thin a layer over those statements can be: a yardstick for the library's own (the target above).
    const lean: Contender = {
      label: "a lean lock over the library's statements on that connection (bounds, lease deadline, lost signal, re-entrancy; no queue, no renewals)",
      runners: [leanLeaseRowLock(floorPool, postgres.url, LEASE_MS)],
    };
    const floors = [advisoryShared, floor, bareRow, oursShared, lean];
    console.log(`postgres 15 ${postgres.url}; uncontended: ${CYCLE_ROUNDS} rounds x ${CYCLES_PER_ROUND} cycles, shuffled order per round after a warm-up; medians, ratios inside each round`);
    const rounds = await interleavedCycles(new Map([...contenders, ...floors].map((c) => [c, c.runners[0]])), CYCLE_ROUNDS, CYCLES_PER_ROUND);
    for (const contender of [...contenders, ...floors]) {
      const perSecond = median(rounds.get(contender)!);
      console.log(`uncontended ${contender.label}: ${Math.round(perSecond)} cycles/s (${(1000 / perSecond).toFixed(3)} ms per cycle)`);
    }
    console.log(`flash sale: ${SALE_CONNECTIONS} processes' worth x ${SALE_BUYERS_PER_CONNECTION} buyers, stock ${SALE_STOCK}, one lock name, median of ${SALE_REPEATS} after one warm-up sale each`);
    const sales = new Map<Contender, FlashSaleResult>();
    for (const contender of contenders) await flashSale(contender.runners, SALE_BUYERS_PER_CONNECTION, SALE_STOCK);
    for (const contender of contenders) {
      const result = await medianFlashSale(SALE_REPEATS, () => flashSale(contender.runners, SALE_BUYERS_PER_CONNECTION, SALE_STOCK));
      sales.set(contender, result);
      printFlashSale(contender.label, result);
    }
    const [ours, advisory, polling] = contenders;
    const timeRatio = (a: Contender, b: Contender) => pairedTimeRatio(rounds.get(a)!, rounds.get(b)!);
    const cycleTimeRatio = timeRatio(ours, advisory);
    const oursVsShared = timeRatio(ours, advisoryShared);
    const floorRatio = timeRatio(floor, advisoryShared);
    const bareRatio = timeRatio(bareRow, advisoryShared);
    const oursVsFloor = timeRatio(ours, floor);
    const sharedVsFloor = timeRatio(oursShared, floor);
    const leanVsFloor = timeRatio(lean, floor);
    const saleRatio = sales.get(ours)!.makespanMs / sales.get(polling)!.makespanMs;
    console.log(`ratios: uncontended cycle time vs advisory ${cycleTimeRatio.toFixed(2)}x (round by round), makespan vs polling ${formatRatio(sales.get(ours)!.makespanMs, sales.get(polling)!.makespanMs)}, vs advisory ${formatRatio(sales.get(ours)!.makespanMs, sales.get(advisory)!.makespanMs)}`);
    console.log(
      `uncontended, against the advisory lock on the floors' connection (round by round): two bare UPDATEs ${bareRatio.toFixed(2)}x, this library's two statements alone ${floorRatio.toFixed(2)}x, ` +
        `this library ${oursVsShared.toFixed(2)}x; this library vs its statements alone ${oursVsFloor.toFixed(2)}x, on their connection ${sharedVsFloor.toFixed(2)}x ` +
        `(a lean lock over them ${leanVsFloor.toFixed(2)}x)`,
    );
    recordTarget("uncontended cycle time vs the advisory lock's", cycleTimeRatio, '<=', 1.5);
    recordFigure("uncontended cycle time vs the advisory lock's on a connection that also commits writes", `${oursVsShared.toFixed(2)}x`);
    recordFigure("uncontended floors on that connection: two bare UPDATEs / the library's statements alone", `${bareRatio.toFixed(2)}x / ${floorRatio.toFixed(2)}x`);
    recordFigure("uncontended cycle time vs the library's statements alone (each on its own connection)", `${oursVsFloor.toFixed(2)}x`);
    recordTarget("uncontended cycle time vs the library's statements alone, both on one connection", sharedVsFloor, '<=', 1.1);
    recordFigure("a lean lock over the library's statements vs those statements alone, on one connection", `${leanVsFloor.toFixed(2)}x`);
    recordTarget("flash-sale makespan vs the polling lock's", saleRatio, '<=', 0.2);

    // The sales' pools keep their connections (200 for the advisory lock's): give them back, so the
    // hand-off counts below, which need one connection per advisory waiter, fit max_connections.
    await Promise.all(pools.splice(0).map((pool) => pool.end().catch(() => undefined)));
    console.log(`statements per hand-off (pg_stat_statements, top-level calls from the holder's last ${HOLD_MS} ms of hold to the next grant; notifications counted on the channel):`);
    for (const waiters of QUEUE_LENGTHS) {
      const ourCount = await ourHandOff(postgres.url, waiters);
      const advisoryCount = waiters <= 200 ? String(await advisoryHandOff(postgres.url, waiters)) : 'n/a (one connection per waiter: more than max_connections)';
      const pollingCount = await pollingHandOff(postgres.url, waiters);
      console.log(`  ${waiters} waiters: this library ${ourCount.statements} statements + ${ourCount.notifications} notification; advisory ${advisoryCount}; polling ${pollingCount}`);
    }
  } finally {
    await Promise.all(services.map((service) => service.onApplicationShutdown()));
    await Promise.all(pools.map((pool) => pool.end().catch(() => undefined)));
    await postgres.stop();
  }
}

/**
 * A lock taken and given back with statements on one pooled connection, held for the take, the
 * section and the release (a session advisory lock needs exactly that; the floors share it).
 */
function onPooledConnection(pool: Pool, take: (client: PoolClient, name: string) => Promise<unknown>, release: (client: PoolClient, name: string) => Promise<unknown>): LockRunner {
  return async (name, section) => {
    const client = await pool.connect();
    try {
      await take(client, name);
      try {
        await section();
      } finally {
        await release(client, name);
      }
    } finally {
      client.release();
    }
  };
}

/** The take and release statements of this library, named and prepared as it sends them, with nothing around them. */
function leaseRowFloor(pool: Pool): LockRunner {
  const sql = statements(DEFAULT_NAMES);
  return onPooledConnection(
    pool,
    (client, name) => client.query({ name: 'floor_take', text: sql.acquire, values: acquireValues(benchEntry(name, 'floor'), 'bench_floor', true) }),
    (client, name) => client.query({ name: 'floor_release', text: sql.release, values: [name, 'floor'] }),
  );
}

/** One row's owner set, then cleared; committed durably as the library's statements are (DURABLE_CTE). */
function bareRowFloor(pool: Pool): LockRunner {
  const take = { name: 'bare_take', text: `WITH ${DURABLE_CTE} UPDATE bare_rows SET owner = $2 WHERE name = $1 AND owner IS NULL AND ${DURABLE_CHECK}` };
  const release = { name: 'bare_release', text: `WITH ${DURABLE_CTE} UPDATE bare_rows SET owner = NULL WHERE name = $1 AND owner = $2 AND ${DURABLE_CHECK}` };
  return onPooledConnection(
    pool,
    async (client, name) => {
      if ((await client.query({ ...take, values: [name, 'bare'] })).rowCount !== 0) return;
      // A new name: its row first, then the same UPDATE as every later cycle.
      await client.query('INSERT INTO bare_rows (name) VALUES ($1) ON CONFLICT DO NOTHING', [name]);
      await client.query({ ...take, values: [name, 'bare'] });
    },
    (client, name) => client.query({ ...release, values: [name, 'bare'] }),
  );
}

function advisoryRunner(pool: Pool): LockRunner {
  return onPooledConnection(
    pool,
    (client, name) => client.query('SELECT pg_advisory_lock(hashtext($1))', [name]),
    (client, name) => client.query('SELECT pg_advisory_unlock(hashtext($1))', [name]),
  );
}

const TRY_ROW =
  `INSERT INTO poll_locks (name, owner, expires_at) VALUES ($1, $2, now() + $3 * interval '1 millisecond') ` +
  `ON CONFLICT (name) DO UPDATE SET owner = EXCLUDED.owner, expires_at = EXCLUDED.expires_at WHERE poll_locks.expires_at <= now() RETURNING 1`;
let pollOwner = 0;

function pollingRunner(pool: Pool): LockRunner {
  return async (name, section) => {
    const owner = `p${pollOwner++}`;
    while ((await pool.query(TRY_ROW, [name, owner, LEASE_MS])).rowCount === 0) await sleep(POLL_MS);
    try {
      await section();
    } finally {
      await pool.query('DELETE FROM poll_locks WHERE name = $1 AND owner = $2', [name, owner]);
    }
  };
}

/** Top-level statements the server ran since the last reset, not counting this query or the reset. */
async function statementsSinceReset(url: string): Promise<number> {
  const [row] = await runSql<{ calls: string | null }>(url, "SELECT sum(calls)::text AS calls FROM pg_stat_statements WHERE query NOT ILIKE '%pg_stat_statements%'");
  return Number(row.calls ?? 0);
}

/**
 * `waiters` entries queued with the backend's own queuing statement, then one hand-off with the
 * backend's own release statement, watched on the waiters' channel.
 */
async function ourHandOff(url: string, waiters: number): Promise<{ statements: number; notifications: number }> {
  const sql = statements(DEFAULT_NAMES);
  const name = `bench-handoff-${waiters}-${Date.now()}`;
  const channel = `bench_wait_${waiters}`;
  const listener = new Client({ connectionString: url });
  await listener.connect();
  let notifications = 0;
  const granted = new Promise<void>((resolve) =>
    listener.on('notification', () => {
      notifications++;
      resolve();
    }),
  );
  await listener.query(`LISTEN ${channel}`);
  const client = new Client({ connectionString: url });
  await client.connect();
  try {
    await client.query(sql.acquire, acquireValues(benchEntry(name, 'holder'), channel, true));
    const owners = Array.from({ length: waiters }, (_, i) => `w${i}`);
    await client.query(sql.queueMany, queueManyValues(owners.map((owner) => benchEntry(name, owner)), channel));
    await runSql(url, 'SELECT pg_stat_statements_reset()');
    await sleep(HOLD_MS);
    await client.query(sql.releaseMany, [[name], ['holder']]);
    await granted;
    await sleep(50); // a second notification, if the statement sent one, arrives meanwhile
    const count = await statementsSinceReset(url);
    await runSql(url, `DELETE FROM ${sqlNames(DEFAULT_NAMES).queue} WHERE name = $1`, [name]);
    return { statements: count, notifications };
  } finally {
    await client.end();
    await listener.end();
  }
}

/** `waiters` connections blocked in pg_advisory_lock behind a holder; one unlock. */
async function advisoryHandOff(url: string, waiters: number): Promise<number> {
  const name = `bench-handoff-${waiters}-${Date.now()}`;
  const pool = new Pool({ connectionString: url, max: waiters + 1 });
  pool.on('error', () => undefined);
  const holder = await pool.connect();
  const clients: PoolClient[] = [];
  try {
    await holder.query('SELECT pg_advisory_lock(hashtext($1))', [name]);
    for (let i = 0; i < waiters; i++) clients.push(await pool.connect());
    let first!: () => void;
    let counted!: () => void;
    const granted = new Promise<void>((resolve) => (first = resolve));
    const afterCount = new Promise<void>((resolve) => (counted = resolve));
    // Each new holder lets go only once the hand-off is counted, so one hand-off is measured.
    const waits = clients.map((client) =>
      client.query('SELECT pg_advisory_lock(hashtext($1))', [name]).then(async () => {
        first();
        await afterCount;
        await client.query('SELECT pg_advisory_unlock(hashtext($1))', [name]).catch(() => undefined);
      }),
    );
    await sleep(200);
    await runSql(url, 'SELECT pg_stat_statements_reset()');
    await sleep(HOLD_MS);
    await holder.query('SELECT pg_advisory_unlock(hashtext($1))', [name]);
    await granted;
    const count = await statementsSinceReset(url);
    counted();
    // The rest take and let go in turn; then the connections go back.
    await Promise.all(waits);
    return count;
  } finally {
    holder.release();
    for (const client of clients) client.release();
    await pool.end();
  }
}

/** `waiters` pollers on a pool of 10 connections behind a holder of the row; one release. */
async function pollingHandOff(url: string, waiters: number): Promise<number> {
  const name = `bench-handoff-${waiters}-${Date.now()}`;
  const pool = new Pool({ connectionString: url, max: 10 });
  pool.on('error', () => undefined);
  let stop = false;
  try {
    await pool.query(TRY_ROW, [name, 'holder', LEASE_MS]);
    let first!: () => void;
    const granted = new Promise<void>((resolve) => (first = resolve));
    const pollers = Array.from({ length: waiters }, async (_, i) => {
      while (!stop) {
        if ((await pool.query(TRY_ROW, [name, `w${i}`, LEASE_MS])).rowCount) return first();
        await sleep(POLL_MS);
      }
    });
    await sleep(200);
    await runSql(url, 'SELECT pg_stat_statements_reset()');
    await sleep(HOLD_MS);
    await pool.query('DELETE FROM poll_locks WHERE name = $1 AND owner = $2', [name, 'holder']);
    await granted;
    const count = await statementsSinceReset(url);
    stop = true;
    await Promise.all(pollers);
    return count;
  } finally {
    stop = true;
    await pool.end();
  }
}
