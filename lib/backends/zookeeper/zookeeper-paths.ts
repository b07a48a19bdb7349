import { createHash } from 'node:crypto';
import type { EntryMode } from '../lock-backend.interface';

/**
 * Lock names become one node name each. ZooKeeper refuses '/', '.', '..', control characters,
 * surrogates (so every character outside the BMP, emoji included), the private use area and
 * U+FFF0..U+FFFF in names. Percent-encoding the UTF-8 bytes of everything outside a small safe
 * set is injective (it can be decoded), so distinct names get distinct, valid nodes. A JS
 * string may hold a lone surrogate, which UTF-8 would turn into U+FFFD (a collision): those are
 * written `%uD800`, which no byte escape can spell.
 */
const SAFE = /^[A-Za-z0-9_\-:]$/;

/** Encoded names above this many characters are hashed, so paths stay short whatever the name. */
export const MAX_ENCODED_NAME_CHARS = 240;
const HEAD_CHARS = 160;

/**
 * `key` as one node name. Short: its encoding. Long: '#' + the head of that encoding + '~' +
 * SHA-256 of the whole encoding. '#' is always escaped in the short form, so a hashed name can
 * never equal a short one: distinct keys collide only if SHA-256 does.
 */
export function lockNodeName(key: string): string {
  let encoded = '';
  for (const char of key) {
    const code = char.codePointAt(0)!;
    if (code >= 0xd800 && code <= 0xdfff) encoded += `%u${code.toString(16).toUpperCase()}`;
    else if (SAFE.test(char)) encoded += char;
    else for (const byte of Buffer.from(char, 'utf8')) encoded += `%${byte.toString(16).toUpperCase().padStart(2, '0')}`;
  }
  if (encoded.length <= MAX_ENCODED_NAME_CHARS) return encoded;
  let head = encoded.slice(0, HEAD_CHARS);
  // Never cut an escape in half: the head is for reading, and should still decode.
  const cut = head.lastIndexOf('%');
  if (cut > HEAD_CHARS - 6) head = head.slice(0, cut);
  return `#${head}~${createHash('sha256').update(encoded).digest('hex')}`;
}

/**
 * Curator's protected mode: the lock node's name starts with an id unique to this attempt,
 * so a create whose reply was lost can be found among the children instead of leaking. The
 * name marks the entry's mode before the sequence number: `-lock-` (a write entry, Curator's
 * mutex), `-read-`, or `-permit<limit>-` (the semaphore's limit, so others can check theirs).
 */
export function protectedPrefix(attemptId: string, mode: EntryMode = 'write', limit?: number): string {
  return `_c_${attemptId}-${mode === 'write' ? 'lock' : mode === 'read' ? 'read' : `permit${limit}`}-`;
}

/** An entry of a lock name's queue, as its node name tells it. */
export interface QueueEntry {
  readonly name: string;
  readonly sequence: number;
  readonly mode: EntryMode;
  /** For a permit: its semaphore's limit. */
  readonly limit?: number;
}

/**
 * The mode mark and the sequence number ZooKeeper appended (10 digits): this backend's marks
 * (protectedPrefix), which include Curator's mutex (`lock-`), and the marks of Curator's
 * InterProcessReadWriteLock (`__READ__`, `__WRIT__`, see curatorPrefix). Every process reads every
 * mark, so a name held through one layout is never taken through another.
 */
const ENTRY_SUFFIX = /(?:(?:^|-)(lock|read|permit([1-9]\d*))-|__(READ|WRIT)__)(\d{10})$/;

/** The entry a node name stands for, or undefined for a node that is not a lock node. */
export function entryOf(nodeName: string): QueueEntry | undefined {
  const match = ENTRY_SUFFIX.exec(nodeName);
  if (!match) return undefined;
  const sequence = Number(match[4]);
  if (match[1] === 'lock' || match[3] === 'WRIT') return { name: nodeName, sequence, mode: 'write' };
  if (match[1] === 'read' || match[3] === 'READ') return { name: nodeName, sequence, mode: 'read' };
  return { name: nodeName, sequence, mode: 'permit', limit: Number(match[2]) };
}

/** Lock entries in queue order (lowest sequence first); anything else under the parent is ignored. */
export function sortedEntries(children: readonly string[]): QueueEntry[] {
  const entries: QueueEntry[] = [];
  for (const child of children) {
    const entry = entryOf(child);
    if (entry) entries.push(entry);
  }
  return entries.sort((a, b) => a.sequence - b.sequence);
}

/** Lock nodes in queue order (lowest sequence first), whatever their modes. */
export function sortedLockNodes(children: readonly string[]): string[] {
  return sortedEntries(children).map((entry) => entry.name);
}

/** Why ZooKeeper would refuse `path` (its PathUtils.validatePath rules), or undefined when valid. */
export function invalidPathReason(path: string): string | undefined {
  if (!path.startsWith('/')) return 'must start with "/"';
  if (path.length > 1 && path.endsWith('/')) return 'must not end with "/"';
  for (const segment of path.slice(1).split('/')) {
    if (segment === '') return 'must not contain an empty segment ("//")';
    if (segment === '.' || segment === '..') return 'must not contain "." or ".." segments';
  }
  for (const char of path) {
    const code = char.charCodeAt(0);
    if (
      code <= 0x1f ||
      (code >= 0x7f && code <= 0x9f) ||
      (code >= 0xd800 && code <= 0xf8ff) ||
      code >= 0xfff0
    ) {
      return `must not contain the character U+${code.toString(16).toUpperCase().padStart(4, '0')}`;
    }
  }
  return undefined;
}

/**
 * The node, under the root, where a session keeps its process's holder description (an
 * ephemeral node: it goes with the session). Its name has a '.', which lockNodeName always
 * escapes, so it is never a lock name's parent.
 */
export function holderRecordName(sessionIdHex: string): string {
  return `holder.${sessionIdHex}`;
}
