require('/work/main/node_modules/reflect-metadata');
const { startRedisServer } = require('/work/main/dist/test/support/redis-server');
const { createRedisBackend } = require('/work/main/dist/lib/backends/redis/redis.backend');
const { lockServiceOver } = require('/work/main/dist/test/support/lock-service-factory');
const Redis = require('/work/main/node_modules/ioredis');
(async () => {
  const server = await startRedisServer();
  const backend = await createRedisBackend({ type: 'redis', url: server.url });
  const service = lockServiceOver(backend);
  const raw = new Redis(server.url);
  const N = 3000;
  async function time(label, fn) {
    const rounds = [];
    for (let r = 0; r < 5; r++) {
      const t = performance.now();
      for (let i = 0; i < N; i++) await fn(i);
      rounds.push((performance.now() - t) / N * 1000);
    }
    rounds.sort((a, b) => a - b);
    console.log(label, rounds[2].toFixed(1), 'us/cycle');
  }
  let k = 0;
  for (let rep = 0; rep < 2; rep++) {
  await time('raw SET NX + DEL', async () => { await raw.set('k1', 'v', 'PX', 30000, 'NX'); await raw.del('k1'); });
  await time('raw 2x PING', async () => { await raw.ping(); await raw.ping(); });
  await time('backend acquire+release', async () => {
    const g = await backend.acquire({ key: 'lock:b', owner: 'o' + (k++), ttlMs: 30000, signal: new AbortController().signal });
    await backend.release(g);
  });
  await time('service withLock', async () => { await service.withLock('s', () => undefined); });
  }
  await service.onApplicationShutdown(); raw.disconnect(); await server.stop(); process.exit(0);
})();
