const { startRedisServer } = require('/work/main/dist/test/support/redis-server');
const Redis = require('/work/main/node_modules/ioredis');
(async () => {
  const server = await startRedisServer();
  const raw = new Redis(server.url);
  const sha = await raw.script('load', 'return 1');
  const keys5 = ['{lock:s}:owner','{lock:s}:fence','{lock:s}:queue','{lock:s}:waiters','{lock:s}:alive'];
  const runs = {
    few: () => raw.evalsha(sha, 1, 'r', 'aaaaaaaaaaaaaaaaaaaaaa', 30000),
    many: () => raw.evalsha(sha, 5, ...keys5, '09572ce4-a235-4e4e-9e3b-6a1c3f0e1d2a:1', 30000, 'b2877b3a-fe8f-a136-002f-2d22ad3f05c9', 31000, 'nest-distributed-lock:', 'lock:s', '1'),
  };
  const res = {}; for (const n in runs) res[n] = { wall: [], cpu: [] };
  for (let round = 0; round < 12; round++) for (const [n, fn] of Object.entries(runs)) {
    const N = 2000; const c = process.cpuUsage(); const t = performance.now();
    for (let i = 0; i < N; i++) await fn();
    const w = (performance.now() - t) / N * 1000; const cu = process.cpuUsage(c);
    if (round > 1) { res[n].wall.push(w); res[n].cpu.push((cu.user + cu.system) / N); }
  }
  const med = (a) => a.sort((x, y) => x - y)[a.length >> 1];
  for (const n in res) console.log(n.padEnd(8), 'wall', med(res[n].wall).toFixed(0), 'us  cpu', med(res[n].cpu).toFixed(0), 'us');
  await server.stop(); process.exit(0);
})();
