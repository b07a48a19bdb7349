require('/work/main/node_modules/reflect-metadata');
const { startRedisServer } = require('/work/main/dist/test/support/redis-server');
const { createRedisBackend } = require('/work/main/dist/lib/backends/redis/redis.backend');
const Redis = require('/work/main/node_modules/ioredis');
(async () => {
  const server = await startRedisServer();
  const backend = await createRedisBackend({ type: 'redis', url: server.url });
  const raw = new Redis(server.url);
  let k = 0;
  for (let i = 0; i < 5000; i++) {
    const g = await backend.acquire({ key: 'lock:b', owner: 'o' + (k++), ttlMs: 30000, signal: new AbortController().signal });
    await backend.release(g);
  }
  for (let i = 0; i < 5000; i++) { await raw.set('k1', 'v', 'PX', 30000, 'NX'); await raw.del('k1'); }
  console.log((await raw.info('commandstats')).split('\n').filter(l => /evalsha|cmdstat_set:|cmdstat_del|incr|lpop|exists|llen|cmdstat_get:/.test(l)).join('\n'));
  await backend.close(); raw.disconnect(); await server.stop(); process.exit(0);
})();
