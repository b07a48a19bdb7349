/**
 * The keys of one plain lock. The lock key is the name other clients use, untouched; the fence
 * counter is ours alone, named so that it hashes to the lock key's Cluster slot. Then one script
 * can take the lock and count the grant together, on one node, which keeps the tokens in grant
 * order on a single server, Sentinel and Cluster alike.
 */
export interface PlainLockKeys {
  /** `<fence> <owner>` while this library holds it, with the lease as its PX expiry; another client's own value while it does. */
  readonly lock: string;
  /** Counter of this library's grants of the lock: the fencing token. Never expires. */
  readonly fence: string;
  /**
   * Sorted set: owner id of each batch of this library that found the lock held -> the Redis
   * time (ms) after which it counts as gone (each try moves it on). Only for inspect's `waiting`.
   */
  readonly waiters: string;
  /** All three, as the scripts take them as KEYS. */
  readonly all: readonly [string, string, string];
}

export function plainLockKeys(lock: string): PlainLockKeys {
  const fence = slotKeyOf(lock, 'fence');
  const waiters = slotKeyOf(lock, 'waiters');
  return { lock, fence, waiters, all: [lock, fence, waiters] };
}

/**
 * A key of ours in the lock key's Cluster slot. A lock key with a hash tag: the same tag, so
 * `<key>:<suffix>`. Without one, its slot is CRC16 of the whole key: `{<key>}:<suffix>` has the
 * whole key as its tag, unless the key holds a `}`, which would cut that tag short; then a short
 * tag of that slot (slotTag) stands in front of the key.
 */
export function slotKeyOf(lock: string, suffix: string): string {
  if (hashTag(lock) !== undefined) return `${lock}:${suffix}`;
  if (!lock.includes('}')) return `{${lock}}:${suffix}`;
  return `{${slotTag(keySlot(lock))}}:${suffix}:${lock}`;
}

/** The text Redis Cluster hashes: between the first `{` and the next `}`, when not empty. */
function hashTag(key: string): string | undefined {
  const open = key.indexOf('{');
  if (open === -1) return undefined;
  const close = key.indexOf('}', open + 1);
  return close > open + 1 ? key.slice(open + 1, close) : undefined;
}

/** The key's Cluster slot, as Redis computes it (CRC16/XMODEM of the tag or the key, mod 16384). */
export function keySlot(key: string): number {
  return crc16(Buffer.from(hashTag(key) ?? key, 'utf8')) % 16384;
}

function crc16(bytes: Uint8Array): number {
  let crc = 0;
  for (const byte of bytes) {
    crc ^= byte << 8;
    for (let bit = 0; bit < 8; bit++) crc = crc & 0x8000 ? ((crc << 1) ^ 0x1021) & 0xffff : (crc << 1) & 0xffff;
  }
  return crc;
}

/** Short tags by slot, found once by counting in base 36 until every slot has one. */
let slotTags: string[] | undefined;

function slotTag(slot: number): string {
  if (!slotTags) {
    const tags: string[] = new Array(16384);
    let found = 0;
    for (let n = 0; found < 16384; n++) {
      const tag = n.toString(36);
      const tagSlot = crc16(Buffer.from(tag)) % 16384;
      if (tags[tagSlot] === undefined) {
        tags[tagSlot] = tag;
        found++;
      }
    }
    slotTags = tags;
  }
  return slotTags[slot];
}
