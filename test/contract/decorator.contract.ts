import 'reflect-metadata';
import assert from 'node:assert/strict';
import { setImmediate as tick } from 'node:timers/promises';
import { afterEach, describe, it } from 'node:test';
import { Body, Controller, Get, Injectable, Module, Param, Post, RequestMethod, SetMetadata, type INestApplication } from '@nestjs/common';
import { PATH_METADATA, METHOD_METADATA } from '@nestjs/common/constants';
import { NestFactory } from '@nestjs/core';
import { DistributedLockModule, LockKeyError, WithLock, WithSemaphore, currentLock, type LockBackend } from '../../lib';
import { countingBackend, type BackendCalls } from '../support/counting-backend';
import { assertExclusive, type HoldInterval } from '../support/timing';

@Injectable()
class OrderService {
  ran = 0;
  readonly intervals: HoldInterval[] = [];

  @WithLock('order:<0.id>')
  async place(order: { id?: unknown }): Promise<bigint> {
    this.ran++;
    const start = process.hrtime.bigint();
    await tick();
    const token = currentLock()!.fencingToken;
    this.intervals.push({ start, end: process.hrtime.bigint(), fencingToken: token, holder: `place ${this.ran}` });
    return this.confirm(order);
  }

  /** Method metadata as @Cron, @MessagePattern or @SubscribeMessage set it, in both orders. */
  @SetMetadata('job', 'nightly')
  @WithLock('report')
  async nightlyReport(): Promise<string> {
    return 'report';
  }

  @WithLock('report')
  @SetMetadata('job', 'hourly')
  async hourlyReport(): Promise<string> {
    return 'report';
  }

  /** Same key, entered again from inside place(): re-entrant, so no deadlock. */
  @WithLock((order: { id: string }) => `order:${order.id}`)
  async confirm(_order: { id?: unknown }): Promise<bigint> {
    return currentLock()!.fencingToken;
  }
}

@Controller('stock')
class StockController {
  constructor(private readonly orders: OrderService) {}

  @Get(':sku')
  @WithLock('stock:<0>')
  async lockAppliedFirst(@Param('sku') sku: string) {
    return { sku, token: String(currentLock()?.fencingToken) };
  }

  @WithLock('stock:<0>')
  @Post(':sku')
  async routeAppliedFirst(@Param('sku') sku: string, @Body() body: { id: string }) {
    return { sku, token: String(await this.orders.place(body)) };
  }
}

/** The other primitives through their decorators: two names, read mode, a semaphore. */
@Injectable()
class AccountService {
  readonly payments: HoldInterval[] = [];
  inside = 0;
  most = 0;

  @WithLock(['account:<0>', 'account:<1>'])
  async transfer(from: string, to: string): Promise<string[]> {
    return [...currentLock()!.fencingTokens.keys()];
  }

  @WithLock('ledger:<0>', { mode: 'read' })
  async balance(_account: string): Promise<boolean> {
    return currentLock()!.reentrant;
  }

  @WithSemaphore('payments', 2)
  async pay(i: number): Promise<void> {
    this.most = Math.max(this.most, ++this.inside);
    const start = process.hrtime.bigint();
    await new Promise((resolve) => setTimeout(resolve, 20));
    this.payments.push({ start, end: process.hrtime.bigint(), fencingToken: currentLock()!.fencingToken, holder: `pay ${i}` });
    this.inside--;
  }
}

/** @WithLock inside a Nest application: decorator order, metadata, key errors, exclusion. */
export function runDecoratorContract(newClient: () => Promise<LockBackend>, modes = true): void {
  describe('@WithLock in a Nest application', () => {
    let app: INestApplication | undefined;
    let calls: BackendCalls;

    afterEach(async () => {
      await app?.close();
      app = undefined;
    });

    async function start(): Promise<{ url: string; orders: OrderService }> {
      const counted = countingBackend(await newClient());
      calls = counted.calls;
      @Module({
        imports: [DistributedLockModule.forRoot({ backend: { type: 'custom', backend: counted.backend } })],
        controllers: [StockController],
        providers: [OrderService, AccountService],
      })
      class TestAppModule {}
      app = await NestFactory.create(TestAppModule, { logger: false });
      await app.listen(0, '127.0.0.1');
      return { url: (await app.getUrl()).replace('[::1]', '127.0.0.1'), orders: app.get(OrderService) };
    }

    it('takes every name of a list of templates, in one canonical order', async () => {
      await start();
      const accounts = app!.get(AccountService);
      const names = await Promise.all([accounts.transfer('a', 'b'), accounts.transfer('b', 'a'), accounts.transfer('a', 'a')]);
      assert.deepEqual(names, [['lock:account:a', 'lock:account:b'].map((key) => key.slice(5)), ['account:a', 'account:b'], ['account:a']]);
      await assert.rejects(accounts.transfer('a', undefined as never), LockKeyError);
    });

    it('runs @WithLock in read mode and @WithSemaphore within its limit', { skip: modes ? false : 'the backend grants only the exclusive lock' }, async () => {
      await start();
      const accounts = app!.get(AccountService);
      assert.equal(await accounts.balance('x'), false);
      await Promise.all(Array.from({ length: 8 }, (_, i) => accounts.pay(i)));
      assert.equal(accounts.payments.length, 8);
      assert.equal(accounts.most, 2, `${accounts.most} payments at once under a semaphore of 2`);
    });

    it('keeps route and job metadata and the method name in either decorator order, and locks the routes', async () => {
      const { url } = await start();
      for (const [name, verb] of [
        ['lockAppliedFirst', RequestMethod.GET],
        ['routeAppliedFirst', RequestMethod.POST],
      ] as const) {
        const method = StockController.prototype[name];
        assert.equal(method.name, name);
        assert.equal(Reflect.getMetadata(PATH_METADATA, method), ':sku');
        assert.equal(Reflect.getMetadata(METHOD_METADATA, method), verb);
      }
      assert.equal(Reflect.getMetadata('job', OrderService.prototype.nightlyReport), 'nightly');
      assert.equal(Reflect.getMetadata('job', OrderService.prototype.hourlyReport), 'hourly');
      const got = await fetch(`${url}/stock/apple`);
      assert.equal(got.status, 200);
      const read = (await got.json()) as { sku: string; token: string };
      assert.equal(read.sku, 'apple');
      assert.match(read.token, /^\d+$/, 'the GET handler ran without its lock');
      assert.equal(calls.acquire, 1, 'the GET route did not take its lock');
      const posted = await fetch(`${url}/stock/pear`, {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: JSON.stringify({ id: 'o-1' }),
      });
      assert.equal(posted.status, 201);
      const placed = (await posted.json()) as { sku: string; token: string };
      assert.equal(placed.sku, 'pear');
      assert.match(placed.token, /^\d+$/);
      // stock:pear around order:o-1 (whose confirm() re-enters order:o-1 at no cost).
      assert.equal(calls.acquire, 3, 'the POST route did not take both of its locks');
    });

    it('serialises calls on one key and re-enters a key the call chain holds', async () => {
      const { orders } = await start();
      const tokens = await Promise.all(Array.from({ length: 50 }, () => orders.place({ id: 'same' })));
      assert.equal(orders.ran, 50);
      assertExclusive(orders.intervals);
      assert.equal(new Set(tokens).size, 50, 'the re-entrant confirm() saw another fencing token');
      assert.equal(calls.release, 50, 'the nested @WithLock reached the backend');
    });

    it('rejects a bad key part with LockKeyError naming template, method and part, before the backend or the handler', async () => {
      const { orders } = await start();
      for (const bad of [undefined, null, '', Number.NaN, {}, [], { nested: 1 }]) {
        await assert.rejects(orders.place({ id: bad }), (error: unknown) => {
          assert.ok(error instanceof LockKeyError, `expected LockKeyError for ${String(bad)}`);
          assert.equal(error.template, 'order:<0.id>');
          assert.equal(error.method, 'OrderService.place');
          assert.equal(error.part, '<0.id>');
          assert.match(error.message, /OrderService\.place/);
          return true;
        });
      }
      await assert.rejects(orders.place(undefined as never), LockKeyError);
      assert.equal(orders.ran, 0, 'the handler ran with a bad key');
      assert.deepEqual(calls, { acquire: 0, tryAcquire: 0, renew: 0, release: 0, inspect: 0, forceRelease: 0 });
    });
  });
}
