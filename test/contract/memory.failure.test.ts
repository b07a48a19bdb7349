import { runFailureContract } from './failure.contract';

// In-process: no server to fail and no other process to share the lock with; bursts still apply.
runFailureContract({
  name: 'memory',
  serverless: true,
  async start() {
    return { direct: { backend: { type: 'memory' }, address: 'memory' }, stop: async () => undefined };
  },
});
