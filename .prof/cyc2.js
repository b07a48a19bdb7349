require('/work/main/node_modules/reflect-metadata');
const { startRedisServer } = require('/work/main/dist/test/support/redis-server');
const { createRedisBackend } = require('/work/main/dist/lib/backends/redis/redis.backend');
const Redis = require('/work/main/node_modules/ioredis');
const Redlock = require('/work/main/node_modules/redlock').default;
(async () => {
  const server = await startRedisServer();
  const backend = await createRedisBackend({ type: 'redis', url: server.url });
  const redlock = new Redlock([new Redis(server.url)], { retryCount: -1 });
  let k = 0; const N = 20000;
  const fn = process.argv[2] === 'redlock' ? async () => { const l = await redlock.acquire(['r'], 30000); await l.release(); }
    : async () => { const g = await backend.acquire({ key: 'lock:b', owner: 'o' + (k++), ttlMs: 30000, signal: new AbortController().signal }); await backend.release(g); };
  const t = performance.now(); for (let i = 0; i < N; i++) await fn();
  console.log(process.argv[2], ((performance.now() - t) / N * 1000).toFixed(1));
  await server.stop(); process.exit(0);
})();
