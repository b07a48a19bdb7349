import { createBackend } from '../../lib/backends/registry';
import { RedisMasters } from '../../servers/redis-masters';
import { runLockContract } from './lock-backend.contract';

// Redlock offers no FIFO across processes: a waiter that arrives while the lock is free between
// a release and the first waiter's vote takes it (docs/redlock.md, "Fairness").
runLockContract({
  name: 'redlock (3 masters)',
  fifo: false,
  // Read locks and semaphores are not built on Redlock's votes (docs/redlock.md): it refuses them.
  modes: false,
  async start() {
    const masters = await RedisMasters.start(3);
    const backend = { type: 'redlock', urls: masters.urls } as const;
    return { newClient: () => createBackend(backend), processBackend: backend, stop: () => masters.stop() };
  },
});
