import { connect, createServer, type Server, type Socket } from 'node:net';

/** One client connection and, while forwarding, its connection to the server. */
interface Link {
  readonly client: Socket;
  upstream?: Socket;
  /** Bytes are dropped both ways; the sockets stay open. */
  blackHoled: boolean;
}

/**
 * A TCP proxy on loopback in front of a server, to cut the network the way it fails in practice.
 * `blackHole()` keeps every socket open and accepts new connections, but forwards nothing either
 * way: a pulled cable or a firewall that drops packets, where the client hears neither an answer
 * nor an error. `heal()` closes the black-holed connections (bytes were lost, so their streams
 * cannot go on) and forwards new ones again.
 */
export class TcpProxy {
  private blackHoling = false;
  private readonly links = new Set<Link>();

  private constructor(
    private readonly server: Server,
    readonly targetPort: number,
  ) {}

  static async start(targetPort: number): Promise<TcpProxy> {
    const server = createServer();
    const proxy = new TcpProxy(server, targetPort);
    server.on('connection', (client) => proxy.accept(client));
    await new Promise<void>((resolve, reject) => {
      server.once('error', reject);
      server.listen(0, '127.0.0.1', resolve);
    });
    return proxy;
  }

  get port(): number {
    return (this.server.address() as { port: number }).port;
  }

  /** `127.0.0.1:<port>`: what a client connecting through the proxy is given. */
  get address(): string {
    return `127.0.0.1:${this.port}`;
  }

  get isBlackHoling(): boolean {
    return this.blackHoling;
  }

  blackHole(): void {
    this.blackHoling = true;
    for (const link of this.links) link.blackHoled = true;
  }

  heal(): void {
    this.blackHoling = false;
    for (const link of [...this.links]) if (link.blackHoled) this.close(link);
  }

  async stop(): Promise<void> {
    for (const link of [...this.links]) this.close(link);
    await new Promise<void>((resolve) => this.server.close(() => resolve()));
  }

  private accept(client: Socket): void {
    const link: Link = { client, blackHoled: this.blackHoling };
    this.links.add(link);
    client.on('error', () => this.close(link)).on('close', () => this.close(link));
    client.on('data', (chunk: Buffer) => {
      if (!link.blackHoled) link.upstream?.write(chunk);
    });
    // A connection accepted while black-holing never reaches the server, even after heal().
    if (link.blackHoled) return;
    // Bytes that arrive before the server accepts are queued by the socket until it connects.
    const upstream = connect({ host: '127.0.0.1', port: this.targetPort });
    link.upstream = upstream;
    upstream.on('error', () => this.close(link)).on('close', () => this.close(link));
    upstream.on('data', (chunk: Buffer) => {
      if (!link.blackHoled) client.write(chunk);
    });
  }

  private close(link: Link): void {
    if (!this.links.delete(link)) return;
    link.client.destroy();
    link.upstream?.destroy();
  }
}
