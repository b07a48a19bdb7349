import { createBackend } from '../../lib/backends/registry';
import { startRedisServer } from '../../servers/redis-server';
import { runLockContract } from './lock-backend.contract';

// The plain lock keeps no queue in Redis (docs/redis.md, "Protocol: plain"): whoever tries first
// after a release takes it, so no FIFO across processes; and it is exclusive only. Waiting is
// pushed for releases by this library (the release announcement), which is all these cases
// release with; another client's release is seen by the retry at the holder's PTTL.
runLockContract({
  name: 'redis (protocol plain)',
  fifo: false,
  modes: false,
  async start() {
    const redis = await startRedisServer();
    const backend = { type: 'redis', url: redis.url, protocol: 'plain' } as const;
    return { newClient: () => createBackend(backend), processBackend: backend, stop: () => redis.stop() };
  },
});
