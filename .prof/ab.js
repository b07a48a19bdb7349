require('/work/main/node_modules/reflect-metadata');
const { startRedisServer } = require('/work/main/dist/test/support/redis-server');
const { createRedisBackend } = require('/work/main/dist/lib/backends/redis/redis.backend');
const { lockServiceOver } = require('/work/main/dist/test/support/lock-service-factory');
const Redis = require('/work/main/node_modules/ioredis');
const Redlock = require('/work/main/node_modules/redlock').default;
(async () => { if (process.env.ALS) new (require('node:async_hooks').AsyncLocalStorage)().run({}, () => {});
  const server = await startRedisServer();
  const backend = await createRedisBackend({ type: 'redis', url: server.url });
  const service = lockServiceOver(backend);
  const redlock = new Redlock([new Redis(server.url)], { retryCount: -1 });
  const raw = new Redis(server.url);
  let k = 0;
  const runs = {
    ...(process.argv[2] ? { service: () => service.withLock('s', () => undefined) } : {}),
    backend: async () => { const g = await backend.acquire({ key: 'lock:b', owner: 'o' + (k++), ttlMs: 30000, signal: new AbortController().signal }); await backend.release(g); },
    redlock: async () => { const l = await redlock.acquire(['r'], 30000); await l.release(); },
    raw: async () => { await raw.set('k1', 'v', 'PX', 30000, 'NX'); await raw.del('k1'); },
  };
  const res = {}; for (const n in runs) res[n] = { wall: [], cpu: [] };
  for (let round = 0; round < 8; round++) for (const [n, fn] of Object.entries(runs)) {
    const N = 1000; const c = process.cpuUsage(); const t = performance.now();
    for (let i = 0; i < N; i++) await fn();
    const w = (performance.now() - t) / N * 1000; const cu = process.cpuUsage(c); 
    if (round > 0) { res[n].wall.push(w); res[n].cpu.push((cu.user + cu.system) / N); }
  }
  const med = (a) => a.sort((x, y) => x - y)[a.length >> 1];
  for (const n in res) console.log(n.padEnd(8), 'wall', med(res[n].wall).toFixed(0), 'us  cpu', med(res[n].cpu).toFixed(0), 'us');
  process.exit(0);
})();
