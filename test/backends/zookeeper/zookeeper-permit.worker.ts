/**
 * A process that takes one permit of a semaphore on ZooKeeper and holds it until it is killed:
 * the modes test SIGKILLs it to see its permit come back. Its settings come in its environment;
 * it reports the grant's token over IPC.
 */
import { randomUUID } from 'node:crypto';
import { createBackend } from '../../../lib/backends/registry';

async function main(): Promise<void> {
  const sessionTimeoutMs = Number(process.env.PERMIT_SESSION_TIMEOUT_MS);
  const backend = await createBackend(
    { type: 'zookeeper', connectionString: process.env.PERMIT_CONNECTION_STRING!, sessionTimeoutMs },
    { ttlMs: sessionTimeoutMs, serverTimeoutMs: 30_000 },
  );
  const grant = await backend.acquire({
    key: process.env.PERMIT_KEY!,
    owner: randomUUID(),
    ttlMs: sessionTimeoutMs,
    signal: new AbortController().signal,
    mode: 'permit',
    limit: Number(process.env.PERMIT_LIMIT),
  });
  process.send!({ type: 'held', fencingToken: String(grant.fencingToken) });
  // Held until the parent kills this process: nothing else keeps it alive.
  setInterval(() => undefined, 60_000);
}

main().catch((error: unknown) => {
  process.send!({ type: 'error', message: String(error) });
  process.exit(1);
});
