import { startPostgresServer } from '../../servers/postgres-server';
import { processFaults } from '../support/server-faults';
import { TcpProxy } from '../support/tcp-proxy';
import { runFailureContract } from './failure.contract';

runFailureContract({
  name: 'postgres',
  async start() {
    const postgres = await startPostgresServer();
    const proxy = await TcpProxy.start(postgres.port);
    return {
      direct: { backend: { type: 'postgres', url: postgres.url }, address: `127.0.0.1:${postgres.port}` },
      proxied: { backend: { type: 'postgres', url: `postgres://postgres@${proxy.address}/postgres` }, address: proxy.address },
      faults: processFaults(postgres.server, proxy),
      async stop() {
        await proxy.stop();
        await postgres.stop();
      },
    };
  },
});
