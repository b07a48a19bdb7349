import { connect, createServer, type Server, type Socket } from 'node:net';

/**
 * A TCP proxy on a free loopback port in front of a server. `blackHole()` makes it a network
 * that went silent: every connection, open or new, is accepted and kept, and nothing is
 * forwarded either way (no reset, no FIN), as a cut-off link or a dropped route looks.
 */
export class BlackHoleProxy {
  private silent = false;
  private readonly sockets = new Set<Socket>();

  private constructor(
    private readonly server: Server,
    readonly port: number,
  ) {}

  static async start(targetPort: number): Promise<BlackHoleProxy> {
    let proxy!: BlackHoleProxy;
    const server = createServer((client) => proxy.accept(client, targetPort));
    await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
    proxy = new BlackHoleProxy(server, (server.address() as { port: number }).port);
    return proxy;
  }

  blackHole(): void {
    this.silent = true;
  }

  async stop(): Promise<void> {
    for (const socket of this.sockets) socket.destroy();
    await new Promise((resolve) => this.server.close(resolve));
  }

  private accept(client: Socket, targetPort: number): void {
    this.sockets.add(client);
    client.on('close', () => this.sockets.delete(client));
    client.on('error', () => undefined);
    if (this.silent) return;
    const upstream = connect({ host: '127.0.0.1', port: targetPort });
    this.sockets.add(upstream);
    upstream.on('close', () => this.sockets.delete(upstream));
    upstream.on('error', () => client.destroy());
    client.on('close', () => upstream.destroy());
    upstream.on('close', () => client.destroy());
    // Forwarded while the link is up; dropped on the floor once it is silent.
    client.on('data', (chunk) => this.silent || upstream.write(chunk));
    upstream.on('data', (chunk) => this.silent || client.write(chunk));
  }
}
