import { startRedisServer, type RedisServer } from './redis-server';

/**
 * N independent throwaway redis-servers (no replication between them): the masters of a
 * Redlock. `extraArgs` go to every one (e.g. `--appendonly yes --appendfsync always`).
 */
export class RedisMasters {
  private constructor(readonly masters: RedisServer[]) {}

  static async start(count: number, extraArgs: string[] = []): Promise<RedisMasters> {
    const started = await Promise.allSettled(Array.from({ length: count }, () => startRedisServer(extraArgs)));
    const masters = started.filter((result) => result.status === 'fulfilled').map((result) => (result as PromiseFulfilledResult<RedisServer>).value);
    const failed = started.find((result) => result.status === 'rejected') as PromiseRejectedResult | undefined;
    if (failed) {
      await Promise.all(masters.map((master) => master.stop()));
      throw failed.reason;
    }
    return new RedisMasters(masters);
  }

  get urls(): string[] {
    return this.masters.map((master) => master.url);
  }

  /** `127.0.0.1:<port>` of each master, as the backend's errors name them. */
  get addresses(): string[] {
    return this.masters.map((master) => `127.0.0.1:${master.port}`);
  }

  /** Starts again every master that was killed or stopped, and resumes every paused one. */
  async restore(): Promise<void> {
    await Promise.all(
      this.masters.map(async (master) => {
        master.server.resume();
        if (!master.server.running) await master.server.restart();
      }),
    );
  }

  async stop(): Promise<void> {
    await Promise.all(this.masters.map((master) => master.stop()));
  }
}
