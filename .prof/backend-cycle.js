require('/work/main/node_modules/reflect-metadata');
const { startRedisServer } = require('/work/main/dist/test/support/redis-server');
const { createRedisBackend } = require('/work/main/dist/lib/backends/redis/redis.backend');
const { lockServiceOver } = require('/work/main/dist/test/support/lock-service-factory');
(async () => {
  const server = await startRedisServer();
  const backend = await createRedisBackend({ type: 'redis', url: server.url });
  const service = lockServiceOver(backend);
  const mode = process.argv[2];
  let k = 0;
  const t = performance.now();
  for (let i = 0; i < (+process.env.N || 20000); i++) {
    if (mode === 'service') await service.withLock('s', () => undefined);
    else { const g = await backend.acquire({ key: 'lock:b', owner: 'o' + (k++), ttlMs: 30000, signal: new AbortController().signal }); await backend.release(g); }
  }
  console.log(mode, ((performance.now() - t) / 20000 * 1000).toFixed(1), 'us');
  await service.onApplicationShutdown(); await server.stop(); process.exit(0);
})();
