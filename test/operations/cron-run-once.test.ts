import assert from 'node:assert/strict';
import { fork, type ChildProcess } from 'node:child_process';
import path from 'node:path';
import { after, before, describe, it } from 'node:test';
import { startRedisServer, type RedisServer } from '../../servers/redis-server';
import { sleep } from '../support/timing';

type WorkerEvent = { type: 'ready' } | { type: 'ran'; tick: number; pid: number } | { type: 'skipped' } | { type: 'log'; level: string; message: string };

const TICKS = 20;

describe('run-once jobs: @Cron in two processes on one Redis', () => {
  let redis: RedisServer;
  const workers: ChildProcess[] = [];
  before(async () => {
    redis = await startRedisServer();
  });
  after(async () => {
    for (const worker of workers) if (worker.exitCode === null) worker.kill('SIGKILL');
    await redis?.stop();
  });

  it(`runs each of ${TICKS} ticks exactly once, one replica 100 ms late, with nothing logged at error level`, { timeout: 60_000 }, async () => {
    const events: Array<WorkerEvent & { worker: number }> = [];
    const start = (index: number, lateMs: number) =>
      new Promise<void>((resolve, reject) => {
        const worker = fork(path.join(__dirname, 'cron.worker.js'), [], {
          env: { ...process.env, REDIS_URL: redis.url, CRON_LATE_MS: String(lateMs) },
          stdio: ['ignore', 'inherit', 'inherit', 'ipc'],
        });
        workers.push(worker);
        worker.on('message', (event: WorkerEvent) => {
          events.push({ ...event, worker: index });
          if (event.type === 'ready') resolve();
        });
        worker.once('exit', (code) => reject(new Error(`cron worker ${index} exited with ${code} before it was ready`)));
      });
    await Promise.all([start(0, 0), start(1, 100)]);
    // Ticks from the first whole second both replicas are up for.
    const firstTick = Math.floor(Date.now() / 1000) + 1;
    const lastTick = firstTick + TICKS - 1;
    await sleep((lastTick + 1) * 1000 + 800 - Date.now());
    for (const worker of workers) worker.send({ type: 'exit' });
    await Promise.all(workers.map((worker) => new Promise((resolve) => (worker.exitCode !== null ? resolve(null) : worker.once('exit', resolve)))));

    const runs = new Map<number, number[]>();
    for (const event of events) if (event.type === 'ran') runs.set(event.tick, [...(runs.get(event.tick) ?? []), event.worker]);
    const perTick = Array.from({ length: TICKS }, (_, i) => ({ tick: firstTick + i, by: runs.get(firstTick + i) ?? [] }));
    const skips = events.filter((event) => event.type === 'skipped').length;
    const byWorker = [0, 1].map((worker) => perTick.filter((tick) => tick.by[0] === worker).length);
    console.log(`${TICKS} ticks: runs per tick ${perTick.map((tick) => tick.by.length).join('')}; run by replica 0/1: ${byWorker.join('/')}; skips logged at debug: ${skips}`);
    assert.deepEqual(
      perTick.filter((tick) => tick.by.length !== 1),
      [],
      'every tick must run exactly once',
    );
    assert.ok(skips >= TICKS - 1, `the other replica must skip each tick (${skips} skips)`);
    assert.deepEqual(events.filter((event) => event.type === 'log'), [], 'nothing logged at warn or error level');
  });
});
