const { startRedisServer } = require('/work/main/dist/test/support/redis-server');
const S = require('/work/main/dist/lib/backends/redis/redis-lock-scripts');
const { lockKeys } = require('/work/main/dist/lib/backends/redis/redis-keys');
const Redis = require('/work/main/node_modules/ioredis');
(async () => {
  const server = await startRedisServer();
  const raw = new Redis(server.url);
  const keys = lockKeys('lock:b').all;
  const trivial = await raw.script('load', "if redis.call('set', KEYS[1], ARGV[1], 'nx', 'px', 30000) then return {1, '5'} end return {0, 5}");
  const trivialRel = await raw.script('load', "if redis.call('get', KEYS[1]) == ARGV[1] then return redis.call('del', KEYS[1]) end return 0");
  let i = 0;
  const runs = {
    ours: async () => { const owner = 'o' + (i++); const r = await S.acquireScript.run(raw, keys, [owner, 30000, 'client-id-xxxxxxxxxxxxxxxxxxxxxxxxxxxxxx', 31000, 'nest-distributed-lock:', 'lock:b', '1']);
      await S.releaseScript.run(raw, keys, [r[1] + ' ' + owner, 'nest-distributed-lock:', 'lock:b']); },
    trivial: async () => { const owner = 'o' + (i++); await raw.evalsha(trivial, 5, ...keys, owner, 30000, 'client-id-xxxxxxxxxxxxxxxxxxxxxxxxxxxxxx', 31000, 'nest-distributed-lock:', 'lock:b', '1');
      await raw.evalsha(trivialRel, 5, ...keys, owner, 'nest-distributed-lock:', 'lock:b'); },
  };
  const res = {}; for (const n in runs) res[n] = { wall: [], cpu: [] };
  for (let round = 0; round < 12; round++) for (const [n, fn] of Object.entries(runs)) {
    const N = 2000; const c = process.cpuUsage(); const t = performance.now();
    for (let j = 0; j < N; j++) await fn();
    const w = (performance.now() - t) / N * 1000; const cu = process.cpuUsage(c);
    if (round > 1) { res[n].wall.push(w); res[n].cpu.push((cu.user + cu.system) / N); }
  }
  const med = (a) => a.sort((x, y) => x - y)[a.length >> 1];
  for (const n in res) console.log(n.padEnd(8), 'wall', med(res[n].wall).toFixed(0), 'us  cpu', med(res[n].cpu).toFixed(0), 'us');
  await server.stop(); process.exit(0);
})();
