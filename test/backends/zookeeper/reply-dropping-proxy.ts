import { connect, createServer, type Server, type Socket } from 'node:net';

/** ZooKeeper's opcode for a multi (transaction) request. */
export const OP_MULTI = 14;

/**
 * A TCP proxy in front of ZooKeeper that can lose one reply on purpose: once armed, it lets the
 * next request of the given opcode through, waits for the server's reply to it (so the server
 * did carry it out), drops that reply and cuts the client's connection. The client sees
 * CONNECTION_LOSS for a request that succeeded: the case Curator's protected mode exists for.
 */
export class ReplyDroppingProxy {
  cuts = 0;
  private armedFor?: number;
  private readonly sockets = new Set<Socket>();

  private constructor(private readonly server: Server) {}

  static async start(targetPort: number): Promise<ReplyDroppingProxy> {
    const server = createServer();
    const proxy = new ReplyDroppingProxy(server);
    server.on('connection', (client) => proxy.relay(client, targetPort));
    await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
    return proxy;
  }

  get connectionString(): string {
    return `127.0.0.1:${(this.server.address() as { port: number }).port}`;
  }

  /** Drop the reply to the next request with this opcode, and the connection with it. */
  arm(opcode: number): void {
    this.armedFor = opcode;
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
      if (!handshake && this.armedFor !== undefined && frame.readInt32BE(8) === this.armedFor) {
        doomedXid = frame.readInt32BE(4);
        this.armedFor = undefined;
      }
      upstream.write(frame);
    });
    frames(upstream, (frame, handshake) => {
      if (!handshake && doomedXid !== undefined && frame.readInt32BE(4) === doomedXid) {
        this.cuts++;
        return closeBoth();
      }
      client.write(frame);
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
