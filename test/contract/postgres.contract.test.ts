import { createBackend } from '../../lib/backends/registry';
import { startPostgresServer } from '../../servers/postgres-server';
import { runLockContract } from './lock-backend.contract';

runLockContract({
  name: 'postgres',
  async start() {
    const postgres = await startPostgresServer();
    return { newClient: () => createBackend({ type: 'postgres', url: postgres.url }), stop: () => postgres.stop() };
  },
});
