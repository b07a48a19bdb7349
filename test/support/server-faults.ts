import type { ServerProcess } from '../../servers/server-process';
import type { TcpProxy } from './tcp-proxy';

/**
 * The faults the failure contract inflicts on a backend's server. Clients that should see a
 * black hole connect through `proxy`; the others connect to the server directly, so that a
 * killed server refuses connections as it would in production.
 */
export interface ServerFaults {
  /** SIGKILL: no goodbye to any client. */
  kill(): Promise<void>;
  /** Starts the server again after kill(), on its port and data; resolves once it answers. */
  start(): Promise<void>;
  /** SIGSTOP: connections stay open, nothing is answered. */
  pause(): void;
  /** SIGCONT. */
  resume(): void;
  /** Connections through the proxy stay open and carry nothing (see TcpProxy). */
  blackHole(): void;
  heal(): void;
  /** Undoes whatever fault is on (a failed test may leave one) and waits until the server answers. */
  restore(): Promise<void>;
}

/** Faults of one server process behind one proxy (Redis, ZooKeeper). */
export function processFaults(server: ServerProcess, proxy: TcpProxy): ServerFaults {
  let paused = false;
  const faults: ServerFaults = {
    kill: () => server.stop('SIGKILL'),
    start: () => server.restart(),
    pause() {
      server.pause();
      paused = true;
    },
    resume() {
      server.resume();
      paused = false;
    },
    blackHole: () => proxy.blackHole(),
    heal: () => proxy.heal(),
    async restore() {
      proxy.heal();
      if (paused) faults.resume();
      if (!server.running) await server.restart();
    },
  };
  return faults;
}
