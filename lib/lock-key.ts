import { createHash } from 'node:crypto';
import { LockKeyError } from './errors';

/** A lock name: a template with `<N>` / `<N.a.b>` parts, or a function of the method's arguments. */
export type LockKeyTemplate = string | ((...args: any[]) => unknown);

/** Turns a method's arguments into a lock name; throws LockKeyError, never returns a bad name. */
export type LockKeyResolver = (args: readonly unknown[]) => string;

type Part = { literal: string } | { source: string; index: number; path: string[] };

const PART = /^(\d+)((?:\.[A-Za-z0-9_$-]+)*)$/;

/**
 * Compiles a template once, when the decorator is applied, so a malformed template fails when
 * the class is defined rather than on the first request. Resolution then only walks the parts.
 */
export function compileLockKey(template: LockKeyTemplate, method: string): LockKeyResolver {
  if (typeof template === 'function') {
    return (args) => formatPart(template(...args), '(function)', method, 'the key function result');
  }
  if (typeof template !== 'string' || template.length === 0) {
    throw new LockKeyError(
      `@WithLock on ${method}: the template must be a non-empty string or a function of the arguments.`,
      String(template),
      method,
    );
  }
  const parts = parseTemplate(template, method);
  return (args) => {
    let name = '';
    for (const part of parts) {
      name += 'literal' in part ? part.literal : formatPart(readPart(part, args, template, method), template, method, part.source);
    }
    return name;
  };
}

function parseTemplate(template: string, method: string): Part[] {
  const parts: Part[] = [];
  let rest = template;
  while (rest.length > 0) {
    const open = rest.indexOf('<');
    if (open === -1) {
      parts.push({ literal: rest });
      break;
    }
    if (open > 0) parts.push({ literal: rest.slice(0, open) });
    const close = rest.indexOf('>', open);
    const source = close === -1 ? rest.slice(open) : rest.slice(open, close + 1);
    const match = close === -1 ? null : PART.exec(rest.slice(open + 1, close));
    if (!match) {
      throw new LockKeyError(
        `@WithLock on ${method}: "${source}" in template "${template}" is not a part; ` +
          'write <N> for argument N or <N.a.b> for a property path of it.',
        template,
        method,
        source,
      );
    }
    parts.push({ source, index: Number(match[1]), path: match[2] ? match[2].slice(1).split('.') : [] });
    rest = rest.slice(close + 1);
  }
  return parts;
}

function readPart(part: Extract<Part, { index: number }>, args: readonly unknown[], template: string, method: string): unknown {
  let value: unknown = args[part.index];
  let walked = `<${part.index}`;
  for (const segment of part.path) {
    if (value === null || typeof value !== 'object') {
      throw new LockKeyError(
        `${method}: cannot read "${segment}" of ${walked}> (${describe(value)}) for ${part.source} in lock template "${template}".`,
        template,
        method,
        part.source,
      );
    }
    value = (value as Record<string, unknown>)[segment];
    walked += `.${segment}`;
  }
  return value;
}

/** Only values with one obvious, stable spelling may become part of a lock name. */
function formatPart(value: unknown, template: string, method: string, source: string): string {
  switch (typeof value) {
    case 'string':
      if (value.length > 0) return value;
      break;
    case 'number':
      if (Number.isFinite(value)) return String(value);
      break;
    case 'bigint':
      return value.toString();
    case 'boolean':
      return String(value);
  }
  throw new LockKeyError(
    `${method}: ${source} in lock template "${template}" resolved to ${describe(value)}; ` +
      'a key part must be a non-empty string, a finite number, a bigint or a boolean.',
    template,
    method,
    source,
  );
}

function describe(value: unknown): string {
  if (value === null) return 'null';
  if (value === '') return 'an empty string';
  if (Array.isArray(value)) return 'an array';
  if (typeof value === 'number') return String(value);
  if (typeof value === 'object') return 'an object';
  return typeof value === 'undefined' ? 'undefined' : `a ${typeof value}`;
}

/** Validates a name given directly to LockService. */
export function assertLockName(name: unknown, method: string): asserts name is string {
  if (typeof name !== 'string' || name.length === 0) {
    throw new LockKeyError(
      `${method}: the lock name must be a non-empty string, got ${describe(name)}.`,
      String(name),
      method,
    );
  }
}

const HASHED_SUFFIX = /~[0-9a-f]{64}$/;

/**
 * The key a backend sees: prefix + name, or, when that is longer than the backend accepts,
 * prefix + the name's first 64 bytes + '~' + the SHA-256 of the whole name in hex. The hashed
 * form is stable across processes and versions, and keeps a readable head for debugging.
 * A short name that already ends like a hashed one is hashed too, so no short name can be
 * spelled like the hashed key of another (distinct names never share a key).
 */
export function toBackendKey(prefix: string, name: string, maxKeyBytes: number): string {
  const full = prefix + name;
  // The common case, without counting bytes: a UTF-16 unit is at most 3 UTF-8 bytes, and a name
  // shorter than '~' + 64 hex digits cannot end like a hashed key.
  if (full.length * 3 <= maxKeyBytes && name.length <= 64) return full;
  if (Buffer.byteLength(full) <= maxKeyBytes && !HASHED_SUFFIX.test(name)) return full;
  const digest = createHash('sha256').update(name).digest('hex');
  let head = '';
  for (const char of name) {
    if (Buffer.byteLength(head + char) > 64) break;
    head += char;
  }
  const hashed = `${prefix}${head}~${digest}`;
  return Buffer.byteLength(hashed) <= maxKeyBytes ? hashed : `${prefix}~${digest}`;
}
