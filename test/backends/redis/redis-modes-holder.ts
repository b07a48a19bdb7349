/**
 * A process that takes one read lock or permit (limit 1) on a Redis server and renews it at a
 * third of its ttl until it is killed, for redis-modes.test.ts. argv: url, key, ttlMs, mode
 * ('read' or 'permit'). Tells its parent 'granted', then 'renewed' after each renewal the server confirmed.
 */
import { createBackend } from '../../../lib/backends/registry';

async function main(): Promise<void> {
  const [url, key, ttl, mode] = process.argv.slice(2);
  const ttlMs = Number(ttl);
  const backend = await createBackend({ type: 'redis', url });
  const grant = await backend.acquire({ key, owner: `dying-${process.pid}`, ttlMs, signal: new AbortController().signal, ...(mode === 'read' ? { mode } : { mode: 'permit', limit: 1 }) });
  process.send!('granted');
  setInterval(async () => {
    if (await backend.renew(grant, ttlMs)) process.send!('renewed');
  }, ttlMs / 3);
}

main().catch((error) => {
  console.error(error);
  process.exit(1);
});
