import { RedisMasters } from '../../servers/redis-masters';
import { DURABLE_REDIS_ARGS } from '../../servers/redis-server';
import type { ServerFaults } from '../support/server-faults';
import { TcpProxy } from '../support/tcp-proxy';
import { runFailureContract } from './failure.contract';

/**
 * Three masters, and the contract's faults inflicted on every one of them at once (a majority is
 * what takes a Redlock down; a minority's faults are test/backends/redlock/). Errors name every
 * master that did not answer, so the address checked is one of them: the one no other contains.
 */
runFailureContract({
  name: 'redlock (3 masters)',
  fifo: false,
  // Read locks and semaphores are not built on Redlock's votes (docs/redlock.md): it refuses them.
  modes: false,
  async start() {
    // Killed and restarted between cases while clients stay connected: with their data, as in production.
    const masters = await RedisMasters.start(3, DURABLE_REDIS_ARGS);
    const proxies = await Promise.all(masters.masters.map((master) => TcpProxy.start(master.port)));
    const distinct = (addresses: string[]) => addresses.find((address) => addresses.every((other) => other === address || !other.includes(address)))!;
    const proxied = proxies.map((proxy) => proxy.address);
    return {
      direct: {
        backend: { type: 'redlock', urls: masters.urls },
        address: distinct(masters.addresses),
        // A majority (2 of 3) must be down for a call to fail: while they restart, it names those.
        servers: { addresses: masters.addresses, unreachableAtLeast: masters.masters.length - Math.floor(masters.masters.length / 2) },
      },
      proxied: { backend: { type: 'redlock', urls: proxied.map((address) => `redis://${address}`) }, address: distinct(proxied) },
      faults: everyMaster(masters, proxies),
      async stop() {
        await Promise.all(proxies.map((proxy) => proxy.stop()));
        await masters.stop();
      },
    };
  },
});

function everyMaster(masters: RedisMasters, proxies: TcpProxy[]): ServerFaults {
  return {
    kill: async () => void (await Promise.all(masters.masters.map((master) => master.server.stop('SIGKILL')))),
    start: async () => void (await Promise.all(masters.masters.map((master) => master.server.restart()))),
    pause: () => masters.masters.forEach((master) => master.server.pause()),
    resume: () => masters.masters.forEach((master) => master.server.resume()),
    blackHole: () => proxies.forEach((proxy) => proxy.blackHole()),
    heal: () => proxies.forEach((proxy) => proxy.heal()),
    async restore() {
      proxies.forEach((proxy) => proxy.heal());
      await masters.restore();
    },
  };
}
