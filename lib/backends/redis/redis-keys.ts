/**
 * The Redis keys of one lock name. All of them start with the same `{tag}`, so they hash to one
 * Cluster slot and every script can touch them all. The tag is the name with `%`, `{` and `}`
 * percent-encoded: Redis takes the text between the first `{` and the next `}` as the tag, so a
 * raw `}` in a name would cut the tag short (or leave `{}`, which Cluster ignores), while the
 * encoding is reversible, so two names never share keys.
 */
export interface LockKeys {
  /** `<fence> <owner>` of the current holder, with the lease as its PX expiry. */
  readonly owner: string;
  /** INCR counter of grants: the fencing token. Never expires, so it never goes back. */
  readonly fence: string;
  /** FIFO list of waiting owner ids (ids whose entry left `waiters` are skipped when popped). */
  readonly queue: string;
  /** Hash: waiting owner id -> `<ttlMs> <clientId> <fence>`, and ` <mode>` for a read ('r') or permit ('p<limit>'). */
  readonly waiters: string;
  /** Hash: client id -> Redis time (ms) after which its waiters count as dead. */
  readonly alive: string;
  /** All five, in the order the scripts take them as KEYS. */
  readonly all: readonly string[];
  /** `[owner]`, and `[owner, queue]`: the KEYS of the renew and the short release scripts, one array each, so their RESP is encoded once (resp-encoding.ts). */
  readonly ownerOnly: readonly string[];
  readonly ownerAndQueue: readonly string[];
  /**
   * Sorted set: read or permit holder's owner id -> its lease end (Redis time, ms). Not in `all`:
   * the scripts derive it from `owner` only when they meet such an entry (redis-mode-lua.ts).
   */
  readonly holders: string;
  /** Hash: read or permit holder's owner id -> `<fence> <mode> <grantedAtMs>`; derived as `holders`. */
  readonly grants: string;
}

export function lockKeys(key: string): LockKeys {
  const tag = hashTag(key);
  const all = [`${tag}:owner`, `${tag}:fence`, `${tag}:queue`, `${tag}:waiters`, `${tag}:alive`] as const;
  return { owner: all[0], fence: all[1], queue: all[2], waiters: all[3], alive: all[4], all, ownerOnly: [all[0]], ownerAndQueue: [all[0], all[2]], holders: `${tag}:holders`, grants: `${tag}:grants` };
}

export const keyList = (keys: LockKeys): readonly string[] => keys.all;

/** `{text}` with `%`, `{` and `}` percent-encoded: a hash tag that is all of `text`, and no other text's. */
export function hashTag(text: string): string {
  return `{${/[%{}]/.test(text) ? text.replace(/[%{}]/g, (c) => `%${c.charCodeAt(0).toString(16).toUpperCase()}`) : text}}`;
}
