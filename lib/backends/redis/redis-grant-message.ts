/** A grant as the release script publishes it: `[fence, key, owner, serverMs]`. */
export interface GrantMessage {
  readonly fence: string;
  readonly key: string;
  readonly owner: string;
  /** The server's time of the grant (ms); absent from a process of an older version. */
  readonly serverMs?: number;
}

/**
 * The grant in a message on our channel, or undefined for anything else (not JSON, another
 * shape): a stray PUBLISH must neither throw inside ioredis' emitter nor be taken for a grant.
 */
export function parseGrantMessage(message: string): GrantMessage | undefined {
  let parsed: unknown;
  try {
    parsed = JSON.parse(message);
  } catch {
    return undefined;
  }
  if (!Array.isArray(parsed) || parsed.length < 3 || parsed.length > 4) return undefined;
  const [fence, key, owner, serverMs] = parsed as unknown[];
  if (typeof fence !== 'string' || !/^\d+$/.test(fence) || typeof key !== 'string' || typeof owner !== 'string') return undefined;
  if (serverMs !== undefined && (typeof serverMs !== 'string' || !/^\d+$/.test(serverMs))) return undefined;
  return { fence, key, owner, serverMs: serverMs === undefined ? undefined : Number(serverMs) };
}
