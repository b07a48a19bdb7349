import { createBackend } from '../../lib/backends/registry';
import { startPostgresServer } from '../../servers/postgres-server';
import { runLockContract } from './lock-backend.contract';

runLockContract({
  name: 'postgres',
  async start() {
    const postgres = await startPostgresServer();
    const backend = { type: 'postgres', url: postgres.url } as const;
    return { newClient: () => createBackend(backend), processBackend: backend, stop: () => postgres.stop() };
  },
});
