import 'reflect-metadata';
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { Module } from '@nestjs/common';
import { NestFactory } from '@nestjs/core';
import { Registry } from 'prom-client';
import { DistributedLockModule, LockConfigError, LockService, MemoryLockBackend, type DistributedLockModuleOptions, type LockGrant } from '../../lib';
import { resolveModuleOptions } from '../../lib/lock-options';
import { abortedWithin } from '../support/timing';

async function appWith(options: DistributedLockModuleOptions) {
  @Module({ imports: [DistributedLockModule.forRoot(options)] })
  class AppModule {}
  return NestFactory.createApplicationContext(AppModule, { logger: false });
}

type Sample = { value: number; labels: Record<string, string | number>; metricName?: string };

async function samplesOf(registry: Registry, name: string): Promise<Sample[]> {
  const metric = registry.getSingleMetric(name);
  return metric ? ((await metric.get()).values as Sample[]) : [];
}

async function valueOf(registry: Registry, name: string, labels: Record<string, string>): Promise<number> {
  const entry = (await samplesOf(registry, name)).find((value) => !value.metricName && Object.entries(labels).every(([key, wanted]) => value.labels[key] === wanted));
  return entry?.value ?? 0;
}

/** Renewals refused: every lock held past its first renewal is lost. */
class RefusingBackend extends MemoryLockBackend {
  override async renew(): Promise<boolean> {
    return false;
  }
}

/** A server that cannot be reached. */
class DownBackend extends MemoryLockBackend {
  override async acquire(): Promise<LockGrant> {
    throw new Error('connect ECONNREFUSED');
  }
}

describe('prom-client metrics (metrics: { registry })', () => {
  it('records acquisitions by outcome, holds, held and waiting gauges, and losses by reason', async () => {
    const registry = new Registry();
    const app = await appWith({ metrics: { registry }, backend: { type: 'custom', backend: new RefusingBackend() } });
    const locks = app.get(LockService);
    try {
      const lock = await locks.acquire('a', { ttlMs: 300 });
      assert.equal(await valueOf(registry, 'distributed_lock_held', { backend: 'memory', mode: 'write' }), 1);
      const waiting = locks.acquire('a', { waitTimeoutMs: 20 }).catch(() => undefined);
      assert.equal(await valueOf(registry, 'distributed_lock_waiting', { backend: 'memory', mode: 'write' }), 1);
      await waiting;
      await abortedWithin(lock.signal, 1_000);
      await lock.release();
      await locks.withLock('a', () => undefined, { onTimeout: 'skip', waitTimeoutMs: 0 });
    } finally {
      await app.close();
    }
    const counts = (await samplesOf(registry, 'distributed_lock_acquire_seconds')).filter((value) => value.metricName === 'distributed_lock_acquire_seconds_count');
    const countOf = (outcome: string) => counts.find((value) => value.labels.outcome === outcome)?.value ?? 0;
    assert.deepEqual({ acquired: countOf('acquired'), timeout: countOf('timeout'), skipped: countOf('skipped') }, { acquired: 2, timeout: 1, skipped: 0 });
    assert.equal(await valueOf(registry, 'distributed_lock_lost_total', { backend: 'memory', mode: 'write', reason: 'renewal-refused' }), 1);
    assert.equal(await valueOf(registry, 'distributed_lock_held', { backend: 'memory', mode: 'write' }), 0);
    assert.equal(await valueOf(registry, 'distributed_lock_waiting', { backend: 'memory', mode: 'write' }), 0);
  });

  it('labels every metric with the mode: write, read, permit', async () => {
    const registry = new Registry();
    const app = await appWith({ metrics: { registry } });
    const locks = app.get(LockService);
    try {
      const reads = [await locks.acquire('catalog', { mode: 'read' }), await locks.acquire('catalog', { mode: 'read' })];
      const permit = await locks.acquireSemaphore('payments', 4);
      assert.equal(await valueOf(registry, 'distributed_lock_held', { backend: 'memory', mode: 'read' }), 2);
      assert.equal(await valueOf(registry, 'distributed_lock_held', { backend: 'memory', mode: 'permit' }), 1);
      await Promise.all([...reads, permit].map((handle) => handle.release()));
      assert.equal(await valueOf(registry, 'distributed_lock_held', { backend: 'memory', mode: 'read' }), 0);
      const text = await registry.metrics();
      assert.match(text, /distributed_lock_acquire_seconds_count\{backend="memory",mode="read",outcome="acquired"\} 2\n/);
      assert.match(text, /distributed_lock_hold_seconds_count\{backend="memory",mode="permit"\} 1\n/);
    } finally {
      await app.close();
    }
  });

  it("counts 'skipped' and 'error' outcomes, and two apps sharing a registry count each event once", async () => {
    const registry = new Registry();
    const busy = await appWith({ metrics: { registry } });
    const down = await appWith({ metrics: { registry }, backend: { type: 'custom', backend: new DownBackend() } });
    try {
      const held = await busy.get(LockService).acquire('job');
      assert.equal(await busy.get(LockService).withLock('job', () => 1, { onTimeout: 'skip', waitTimeoutMs: 10 }), undefined);
      await held.release();
      await assert.rejects(down.get(LockService).acquire('job'), /ECONNREFUSED/);
    } finally {
      await down.close();
      await busy.close();
    }
    const text = await registry.metrics();
    assert.match(text, /distributed_lock_acquire_seconds_count\{backend="memory",mode="write",outcome="acquired"\} 1\n/);
    assert.match(text, /distributed_lock_acquire_seconds_count\{backend="memory",mode="write",outcome="skipped"\} 1\n/);
    assert.match(text, /distributed_lock_acquire_seconds_count\{backend="memory",mode="write",outcome="error"\} 1\n/);
  });

  it('is validated with the other options', () => {
    assert.throws(() => resolveModuleOptions({ metrics: 'yes' as never }), (error: LockConfigError) => error.option === 'metrics');
    assert.throws(() => resolveModuleOptions({ metrics: { registery: new Registry() } as never }), /did you mean "metrics.registry"/);
    assert.throws(() => resolveModuleOptions({ metrics: { registry: {} as never } }), (error: LockConfigError) => error.option === 'metrics.registry');
    assert.throws(() => resolveModuleOptions({ tracing: 'off' as never }), (error: LockConfigError) => error.option === 'tracing');
    assert.throws(() => resolveModuleOptions({ metric: true } as never), /did you mean "metrics"/);
  });
});
