import { LockConfigError } from './errors';

/**
 * Rejects any field not in `known`, naming it and the nearest known name: a misspelt option
 * (`waitTimout`) must fail loudly, not fall back to the default in silence.
 * `prefix` is how the field is shown: '' for module options, 'backend.' for a backend's.
 */
export function rejectUnknownFields(options: object, known: readonly string[], where: string, prefix = ''): void {
  // for...in, not Object.keys: no array per call (every lock call checks its options).
  for (const field in options) {
    if (known.includes(field) || !Object.hasOwn(options, field)) continue;
    const nearest = nearestName(field, known);
    const hint = nearest ? `did you mean "${prefix}${nearest}"?` : `the options are ${known.map((name) => prefix + name).join(', ')}.`;
    throw new LockConfigError(prefix + field, `is not ${where} option; ${hint}`);
  }
}

/**
 * A number of milliseconds, or a LockConfigError that says what was wrong: a string such as
 * '5000' (what ConfigService returns from an environment variable) is named as a string.
 */
export function assertMilliseconds(option: string, value: unknown, rule: (ms: number) => boolean, expected: string | (() => string)): asserts value is number {
  if (typeof value === 'string') {
    throw new LockConfigError(option, `must be a number, got the string ${JSON.stringify(value)}; convert it first (e.g. Number(config.get('...'))).`);
  }
  if (typeof value !== 'number' || !rule(value)) throw new LockConfigError(option, `must be ${typeof expected === 'string' ? expected : expected()}, got ${String(value)}.`);
}

/** The known name closest to `name` by edit distance (case-insensitive), if close enough to be a typo. */
export function nearestName(name: string, known: readonly string[]): string | undefined {
  let best: string | undefined;
  let bestDistance = Infinity;
  for (const candidate of known) {
    const distance = editDistance(name.toLowerCase(), candidate.toLowerCase());
    if (distance < bestDistance) [best, bestDistance] = [candidate, distance];
  }
  // A typo changes a few letters; `ttl` for `ttlMs` drops two. More is another word.
  return best !== undefined && bestDistance <= Math.max(2, Math.floor(best.length / 3)) ? best : undefined;
}

function editDistance(a: string, b: string): number {
  let previous = Array.from({ length: b.length + 1 }, (_, i) => i);
  for (let i = 1; i <= a.length; i++) {
    const current = [i];
    for (let j = 1; j <= b.length; j++) {
      current[j] = Math.min(previous[j] + 1, current[j - 1] + 1, previous[j - 1] + (a[i - 1] === b[j - 1] ? 0 : 1));
    }
    previous = current;
  }
  return previous[b.length];
}
