import { startRedisServer } from '../../servers/redis-server';
import { processFaults } from '../support/server-faults';
import { TcpProxy } from '../support/tcp-proxy';
import { runFailureContract } from './failure.contract';

// No queue in Redis, so no FIFO; exclusive only (docs/redis.md, "Protocol: plain").
runFailureContract({
  name: 'redis (protocol plain)',
  lockDelay: false,
  fifo: false,
  modes: false,
  async start() {
    const redis = await startRedisServer();
    const proxy = await TcpProxy.start(redis.port);
    return {
      direct: { backend: { type: 'redis', url: redis.url, protocol: 'plain' }, address: `127.0.0.1:${redis.port}` },
      proxied: { backend: { type: 'redis', url: `redis://${proxy.address}`, protocol: 'plain' }, address: proxy.address },
      faults: processFaults(redis.server, proxy),
      async stop() {
        await proxy.stop();
        await redis.stop();
      },
    };
  },
});
