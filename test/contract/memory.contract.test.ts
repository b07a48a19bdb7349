import { MemoryLockBackend, MemoryLockStore } from '../../lib';
import { runLockContract } from './lock-backend.contract';

runLockContract({
  name: 'memory',
  async start() {
    const store = new MemoryLockStore();
    return { newClient: async () => new MemoryLockBackend(store), stop: async () => undefined };
  },
});
