import { createBackend } from '../../lib/backends/registry';
import { startRedisServer } from '../../servers/redis-server';
import { runLockContract } from './lock-backend.contract';

runLockContract({
  name: 'redis',
  async start() {
    const redis = await startRedisServer();
    return { newClient: () => createBackend({ type: 'redis', url: redis.url }), stop: () => redis.stop() };
  },
});
