import { createBackend } from '../../lib/backends/registry';
import { startRedisServer } from '../../servers/redis-server';
import { runLockContract } from './lock-backend.contract';

runLockContract({
  name: 'redis',
  async start() {
    const redis = await startRedisServer();
    const backend = { type: 'redis', url: redis.url } as const;
    return { newClient: () => createBackend(backend), processBackend: backend, stop: () => redis.stop() };
  },
});
