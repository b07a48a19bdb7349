const { startRedisServer } = require('/work/main/dist/test/support/redis-server');
const Redis = require('/work/main/node_modules/ioredis');
const Redlock = require('/work/main/node_modules/redlock').default;
(async () => {
  const server = await startRedisServer();
  const redlock = new Redlock([new Redis(server.url)], { retryCount: -1 });
  const raw = new Redis(server.url);
  for (let i = 0; i < 5000; i++) { const l = await redlock.acquire(['r'], 30000); await l.release(); }
  console.log((await raw.info('commandstats')).split('\n').filter(l => /eval/.test(l)).join('\n'));
  process.exit(0);
})();
