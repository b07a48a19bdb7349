/**
 * Commands in RESP, the Redis wire format, for our own connection's scripts: the parts that
 * repeat on every call (the script's hash, a lock's key names) are encoded once and reused.
 * ioredis encodes every word of every command afresh, and flattens its arguments first
 * (docs/redis.md has the measurement).
 */

/** One word: `$<bytes>\r\n<word>\r\n`. */
export function bulk(word: string | number): string {
  const text = String(word);
  return `$${Buffer.byteLength(text)}\r\n${text}\r\n`;
}

/** Words one after another, as `bulk` encodes each. */
export function bulks(words: readonly (string | number)[]): string {
  let encoded = '';
  for (const word of words) encoded += bulk(word);
  return encoded;
}

/** Key lists seen before, encoded with their count first (the `numkeys` of EVAL and EVALSHA). */
const encodedKeyLists = new WeakMap<readonly string[], string>();

/**
 * `numkeys key...` of a script call. Backends keep one array per lock name (a bounded cache),
 * so a name's keys are encoded once.
 */
export function encodedKeys(keys: readonly string[]): string {
  let encoded = encodedKeyLists.get(keys);
  if (encoded === undefined) encodedKeyLists.set(keys, (encoded = bulk(keys.length) + bulks(keys)));
  return encoded;
}

/** The array header of a command of `words` words, its name counted. */
export function commandHeader(words: number): string {
  return `*${words}\r\n`;
}
