import { DURABLE_REDIS_ARGS, startRedisServer } from '../../servers/redis-server';
import { processFaults } from '../support/server-faults';
import { TcpProxy } from '../support/tcp-proxy';
import { runFailureContract } from './failure.contract';

runFailureContract({
  name: 'redis',
  async start() {
    // Killed and restarted between cases while clients stay connected: with its data, as in production.
    const redis = await startRedisServer(DURABLE_REDIS_ARGS);
    const proxy = await TcpProxy.start(redis.port);
    return {
      direct: { backend: { type: 'redis', url: redis.url }, address: `127.0.0.1:${redis.port}` },
      proxied: { backend: { type: 'redis', url: `redis://${proxy.address}` }, address: proxy.address },
      faults: processFaults(redis.server, proxy),
      async stop() {
        await proxy.stop();
        await redis.stop();
      },
    };
  },
});
