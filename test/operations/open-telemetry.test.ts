import 'reflect-metadata';
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { Injectable, Module } from '@nestjs/common';
import { NestFactory } from '@nestjs/core';
import { context, SpanStatusCode, trace } from '@opentelemetry/api';
import { AsyncLocalStorageContextManager } from '@opentelemetry/context-async-hooks';
import { BasicTracerProvider, InMemorySpanExporter, SimpleSpanProcessor } from '@opentelemetry/sdk-trace-base';
import { DistributedLockModule, LockService, LockTimeoutError, WithLock, type DistributedLockModuleOptions } from '../../lib';
import { sleep } from '../support/timing';

@Injectable()
class Inventory {
  @WithLock('stock:<0>')
  async buy(sku: string): Promise<string> {
    await sleep(30);
    return sku;
  }
}

async function appWith(options: DistributedLockModuleOptions) {
  @Module({ imports: [DistributedLockModule.forRoot(options)], providers: [Inventory] })
  class AppModule {}
  return NestFactory.createApplicationContext(AppModule, { logger: false });
}

describe('OpenTelemetry: a lock.acquire span per acquisition (the SDK and its in-memory exporter)', () => {
  const exporter = new InMemorySpanExporter();
  const contextManager = new AsyncLocalStorageContextManager();
  before(() => {
    context.setGlobalContextManager(contextManager.enable());
    trace.setGlobalTracerProvider(new BasicTracerProvider({ spanProcessors: [new SimpleSpanProcessor(exporter)] }));
  });
  after(() => {
    trace.disable();
    context.disable();
  });

  it("is a child of the caller's span, with name, backend, token and waited ms; a timeout is an error span", async () => {
    exporter.reset();
    const app = await appWith({});
    const tracer = trace.getTracer('test');
    let parentSpanId = '';
    let firstToken = 0n;
    try {
      await tracer.startActiveSpan('POST /inventory/pear/buy', async (request) => {
        parentSpanId = request.spanContext().spanId;
        const inventory = app.get(Inventory);
        // Two at once: the second waits for the first's 30 ms.
        await Promise.all([inventory.buy('pear'), inventory.buy('pear')]);
        request.end();
      });
      const held = await app.get(LockService).acquire('stock:fig');
      firstToken = held.fencingToken;
      await assert.rejects(app.get(LockService).acquire('stock:fig', { waitTimeoutMs: 10 }), LockTimeoutError);
      await held.release();
    } finally {
      await app.close();
    }
    const spans = exporter.getFinishedSpans().filter((span) => span.name === 'lock.acquire');
    assert.equal(spans.length, 4);
    const [pear1, pear2, fig, figTimeout] = spans;
    for (const span of [pear1, pear2]) {
      assert.equal(span.parentSpanContext?.spanId, parentSpanId, "the lock span must be a child of the caller's span");
      assert.equal(span.attributes['lock.name'], 'stock:pear');
      assert.equal(span.attributes['lock.backend'], 'memory');
      assert.equal(span.attributes['lock.acquired'], true);
      assert.match(String(span.attributes['lock.fencing_token']), /^\d+$/);
    }
    const waited = [pear1, pear2].map((span) => span.attributes['lock.waited_ms'] as number).sort((x, y) => x - y);
    assert.ok(waited[1] >= 25, `the second buyer waited ${waited[1]} ms for the first's 30 ms`);
    assert.equal(fig.attributes['lock.fencing_token'], firstToken.toString());
    assert.equal(fig.parentSpanContext, undefined);
    assert.equal(figTimeout.status.code, SpanStatusCode.ERROR);
    assert.equal(figTimeout.attributes['lock.acquired'], false);
    assert.equal(figTimeout.events[0]?.name, 'exception');
  });

  it('tracing: false makes no span', async () => {
    exporter.reset();
    const app = await appWith({ tracing: false });
    try {
      await app.get(Inventory).buy('kiwi');
    } finally {
      await app.close();
    }
    assert.equal(exporter.getFinishedSpans().length, 0);
  });
});
