require('/work/main/node_modules/reflect-metadata');
const { startRedisServer } = require('/work/main/dist/test/support/redis-server');
const S = require('/work/main/dist/lib/backends/redis/redis-lock-scripts');
const { lockKeys } = require('/work/main/dist/lib/backends/redis/redis-keys');
const Redis = require('/work/main/node_modules/ioredis');
(async () => {
  const server = await startRedisServer();
  const raw = new Redis(server.url);
  const keys = lockKeys('lock:b');
  console.log(keys);
  const N = 5000;
  async function time(label, fn) { const rs=[]; for (let r=0;r<5;r++){const t=performance.now(); for (let i=0;i<N;i++) await fn(i); rs.push((performance.now()-t)/N*1000);} rs.sort((a,b)=>a-b); console.log(label, rs[2].toFixed(1)); }
  for (let rep=0;rep<2;rep++){
  await time('set/del', async () => { await raw.set('k1', 'v', 'PX', 30000, 'NX'); await raw.del('k1'); });
  await time('eval tiny x2', async () => { await raw.eval("return redis.call('set', KEYS[1], ARGV[1], 'px', 30000, 'nx')", 1, 'k1', 'v'); await raw.eval("return redis.call('del', KEYS[1])", 1, 'k1'); });
  await time('our scripts', async (i) => {
    const owner = 'o' + i;
    const r = await S.acquireScript.run(raw, keys.all, [owner, 30000, 'client-id-xxxxxxxxxxxxxxxxxxxxxxxxxxxxxx', 31000, 'nest-distributed-lock:', 'lock:b', '1']);
    await S.releaseScript.run(raw, keys.all, [r[1] + ' ' + owner, 'nest-distributed-lock:', 'lock:b']);
  });
  }
  raw.disconnect(); await server.stop(); process.exit(0);
})();
