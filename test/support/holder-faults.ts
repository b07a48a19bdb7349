import assert from 'node:assert/strict';
import { it } from 'node:test';
import type { BackendOptions, LockService } from '../../lib';
import { createBackend } from '../../lib/backends/registry';
import type { Connection } from '../../sample-app/backends/sample-backend';
import type { StockStore } from '../../sample-app/inventory/stock-store';
import { HolderProcess } from './holder-process';
import { lockServiceOver } from './lock-service-factory';
import { sleep } from './timing';

/**
 * What a backend's own fault suite needs in each test: lock services in this process and holder
 * processes on the same server, all stopped after the test, and names no other test uses.
 */
export class HolderFaults {
  private readonly services: LockService[] = [];
  private readonly holders: HolderProcess[] = [];
  private seq = 0;

  constructor(
    /** The backend type, as the holder process and `createBackend` name it. */
    private readonly type: BackendOptions['type'],
    /** Its connection options, asked for per test (the server is started in `before`). */
    private readonly connection: () => Connection,
    /** The holder processes' lease: short, so each test takes about a second. */
    readonly ttlMs: number,
  ) {}

  newName(): string {
    return `fault-${process.pid}-${++this.seq}`;
  }

  async service(): Promise<LockService> {
    const created = lockServiceOver(await createBackend({ type: this.type, ...this.connection() } as BackendOptions));
    this.services.push(created);
    return created;
  }

  async holder(): Promise<HolderProcess> {
    const started = await HolderProcess.start(this.type, this.connection(), this.ttlMs);
    this.holders.push(started);
    return started;
  }

  /** For afterEach. */
  async stopAll(): Promise<void> {
    await Promise.all(this.holders.splice(0).map((holder) => holder.stop()));
    await Promise.all(this.services.splice(0).map((service) => service.onApplicationShutdown()));
  }

  /**
   * The two holder-process cases every leasing backend passes with a bound tighter than the
   * failure contract's: `boundMs` after the lease at most. Call inside the backend's describe.
   */
  holderCases(openStore: () => Promise<StockStore>, boundMs: number): void {
    it('a holder killed with SIGKILL: a waiter in another process gets the lock within the ttl plus a small bound', async (t) => {
      const name = this.newName();
      const killed = await this.holder();
      const killedToken = await killed.acquire(name);
      const waiter = (await this.service()).acquire(name, { waitTimeoutMs: 10_000 });
      await sleep(this.ttlMs / 2); // the holder renews meanwhile: the lease left at the kill is the whole ttl
      const killedAt = Date.now();
      killed.kill('SIGKILL');
      const lock = await waiter;
      const waitedMs = Date.now() - killedAt;
      t.diagnostic(`lock handed on ${waitedMs} ms after SIGKILL (ttl ${this.ttlMs} ms, bound ${this.ttlMs + boundMs} ms)`);
      assert.ok(waitedMs <= this.ttlMs + boundMs, `the waiter got the lock ${waitedMs} ms after the kill (ttl ${this.ttlMs} ms)`);
      assert.ok(lock.fencingToken > killedToken);
      await lock.release();
    });

    it('a holder paused past its ttl: another process gets the lock; after SIGCONT its signal has fired and its fenced write is refused', async (t) => {
      const name = this.newName();
      const sku = `sku-${name}`;
      const store = await openStore();
      await store.seed(sku, 10);
      const paused = await this.holder();
      const staleToken = await paused.acquire(name);
      paused.kill('SIGSTOP');
      const started = Date.now();
      const lock = await (await this.service()).acquire(name, { waitTimeoutMs: 10_000 });
      t.diagnostic(`lock taken ${Date.now() - started} ms after SIGSTOP (ttl ${this.ttlMs} ms, bound ${this.ttlMs + boundMs} ms)`);
      assert.ok(Date.now() - started <= this.ttlMs + boundMs, `took ${Date.now() - started} ms`);
      assert.ok(lock.fencingToken > staleToken);
      await store.write(sku, { stock: 9, lucky: 1 }, lock.fencingToken);
      paused.kill('SIGCONT');
      const lost = await paused.lost(5_000);
      assert.match(lost.message, /lost/);
      assert.equal(await paused.write(sku, { stock: 5, lucky: 5 }), 'StaleFencingTokenError');
      assert.deepEqual(await store.read(sku), { stock: 9, lucky: 1 }, 'the stale write changed the stock');
      assert.equal(lock.isHeld, true, "the paused holder's wake-up disturbed the new holder");
      await lock.release();
      await store.close();
    });
  }
}
