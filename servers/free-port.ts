import { createServer } from 'node:net';

/** A port on 127.0.0.1 that was free a moment ago (the OS picks it; never a fixed port). */
export function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const server = createServer();
    server.unref();
    server.on('error', reject);
    server.listen(0, '127.0.0.1', () => {
      const { port } = server.address() as { port: number };
      server.close(() => resolve(port));
    });
  });
}

/** Free ports, distinct from each other (the OS may hand one out twice in a row). */
export async function distinctPorts(count: number): Promise<number[]> {
  const ports = new Set<number>();
  while (ports.size < count) ports.add(await freePort());
  return [...ports];
}
