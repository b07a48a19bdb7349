import { createBackend } from '../../../lib/backends/registry';

/**
 * A process that takes one permit (limit 1) of `key` and holds it without renewing until it is
 * killed: argv url, key, ttl ms. Tells its parent the token once it holds.
 */
async function main(): Promise<void> {
  const [url, key, ttlMs] = process.argv.slice(2);
  const backend = await createBackend({ type: 'postgres', url });
  const grant = await backend.acquire({ key, owner: 'crashing-holder', ttlMs: Number(ttlMs), signal: new AbortController().signal, mode: 'permit', limit: 1 });
  process.send!({ token: grant.fencingToken.toString() });
  setInterval(() => undefined, 60_000);
}

void main();
