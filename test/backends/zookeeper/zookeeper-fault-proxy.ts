import { connect, createServer, type Server, type Socket } from 'node:net';

/** ZooKeeper's opcode for a multi (transaction) request. */
export const OP_MULTI = 14;

/**
 * A TCP proxy in front of ZooKeeper that breaks the connection on purpose, as a network would:
 * - `dropNextReply`: lets the next request of an opcode through, waits for the server's reply
 *   (so the server did carry it out), drops that reply and cuts the client's connection. The
 *   client sees CONNECTION_LOSS for a request that succeeded: the case Curator's protected mode
 *   exists for. Optionally the requests before it are lost on the way in (never carried out).
 * - `block`: cuts every connection and hangs up on new ones until `unblock`, so another client
 *   can act on the session meanwhile. The client's connect succeeds before the hang-up, and
 *   node-zookeeper-client queues its SET_WATCHES on each such connect.
 * - `refuse`: cuts every connection and closes the port until `reopen`: connects are refused,
 *   as by a server that is down.
 * - `blackHole`: keeps every connection open and accepts new ones, but forwards nothing either
 *   way: a server cut off by a firewall that drops packets, with no socket error to notice.
 * - `spaceReplies`: forwards what the server sends one frame at a time, in order, `ms` apart, so
 *   the client reads each reply or event on its own (as a slow network delivers them).
 */
export class ZooKeeperFaultProxy {
  /** Connections cut on purpose so far. */
  cuts = 0;
  private armed?: { opcode: number; requestsToLose: number };
  private blocked = false;
  private replySpacingMs = 0;
  private swallowing = false;
  private readonly sockets = new Set<Socket>();

  private port = 0;

  private constructor(private readonly server: Server) {}

  static async start(targetPort: number): Promise<ZooKeeperFaultProxy> {
    const server = createServer();
    const proxy = new ZooKeeperFaultProxy(server);
    server.on('connection', (client) => {
      if (proxy.blocked) return client.destroy();
      if (proxy.swallowing) return proxy.hold(client);
      proxy.relay(client, targetPort);
    });
    await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
    proxy.port = (server.address() as { port: number }).port;
    return proxy;
  }

  get connectionString(): string {
    return `127.0.0.1:${this.port}`;
  }

  /**
   * Drops the reply to the next request with this opcode, and the connection with it. With
   * `requestsToLose`, that many requests of the opcode are first dropped before reaching the
   * server (each also cutting the connection).
   */
  dropNextReply(opcode: number, { requestsToLose = 0 } = {}): void {
    this.armed = { opcode, requestsToLose };
  }

  block(): void {
    this.blocked = true;
    for (const socket of this.sockets) socket.destroy();
  }

  unblock(): void {
    this.blocked = false;
  }

  async refuse(): Promise<void> {
    const closed = new Promise<void>((resolve) => this.server.close(() => resolve()));
    for (const socket of this.sockets) socket.destroy();
    await closed;
  }

  async reopen(): Promise<void> {
    await new Promise<void>((resolve) => this.server.listen(this.port, '127.0.0.1', resolve));
  }

  spaceReplies(ms: number): void {
    this.replySpacingMs = ms;
  }

  blackHole(): void {
    this.swallowing = true;
  }

  private hold(client: Socket): void {
    this.sockets.add(client);
    client.on('error', () => client.destroy()).on('close', () => this.sockets.delete(client));
    client.resume();
  }

  async stop(): Promise<void> {
    for (const socket of this.sockets) socket.destroy();
    await new Promise<void>((resolve) => this.server.close(() => resolve()));
  }

  private relay(client: Socket, targetPort: number): void {
    const upstream = connect({ host: '127.0.0.1', port: targetPort });
    this.sockets.add(client).add(upstream);
    const closeBoth = () => {
      client.destroy();
      upstream.destroy();
      this.sockets.delete(client);
      this.sockets.delete(upstream);
    };
    client.on('error', closeBoth).on('close', closeBoth);
    upstream.on('error', closeBoth).on('close', closeBoth);
    let doomedXid: number | undefined;
    // The first frame each way is the session handshake, which has no request header.
    frames(client, (frame, handshake) => {
      if (this.swallowing) return;
      const armed = this.armed;
      if (!handshake && armed && frame.readInt32BE(8) === armed.opcode) {
        if (armed.requestsToLose > 0) {
          armed.requestsToLose--;
          this.cuts++;
          return closeBoth();
        }
        doomedXid = frame.readInt32BE(4);
        this.armed = undefined;
      }
      upstream.write(frame);
    });
    let spaced = Promise.resolve();
    frames(upstream, (frame, handshake) => {
      if (this.swallowing) return;
      if (!handshake && doomedXid !== undefined && frame.readInt32BE(4) === doomedXid) {
        this.cuts++;
        return closeBoth();
      }
      const spacingMs = this.replySpacingMs;
      if (spacingMs === 0) return void client.write(frame);
      spaced = spaced.then(
        () =>
          new Promise<void>((resolve) =>
            setTimeout(() => {
              client.write(frame);
              resolve();
            }, spacingMs),
          ),
      );
    });
  }
}

/** Calls `onFrame` with each length-prefixed frame, prefix included, in order. */
function frames(socket: Socket, onFrame: (frame: Buffer, handshake: boolean) => void): void {
  let buffered = Buffer.alloc(0);
  let handshake = true;
  socket.on('data', (chunk: Buffer) => {
    buffered = Buffer.concat([buffered, chunk]);
    while (buffered.length >= 4 && buffered.length >= 4 + buffered.readInt32BE(0)) {
      const size = 4 + buffered.readInt32BE(0);
      const frame = buffered.subarray(0, size);
      buffered = buffered.subarray(size);
      onFrame(frame, handshake);
      handshake = false;
    }
  });
}
