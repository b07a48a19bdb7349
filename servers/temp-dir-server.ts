import { mkdtemp, rm } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';

/**
 * Starts a throwaway server whose files live in a fresh temporary directory, and removes the
 * directory when the server stops, or at once when it fails to start.
 */
export async function inTempDir<Server extends { stop(): Promise<void> }>(
  prefix: string,
  start: (dir: string) => Promise<Server>,
): Promise<Server> {
  const dir = await mkdtemp(path.join(os.tmpdir(), prefix));
  const removeDir = () => rm(dir, { recursive: true, force: true });
  let server: Server;
  try {
    server = await start(dir);
  } catch (error) {
    await removeDir();
    throw error;
  }
  const stopServer = server.stop.bind(server);
  server.stop = async () => {
    await stopServer();
    await removeDir();
  };
  return server;
}
