import { LockKeyError, LockTimeoutError } from './errors';
import { LockHandle } from './lock-handle';
import { assertLockName } from './lock-key';
import type { ResolvedLockOptions } from './lock-options';

/** One name of a call on several, with the key the backend sees. */
export interface NamedKey {
  readonly name: string;
  readonly key: string;
}

/** Takes one name: waiting up to `options.waitTimeoutMs` when `wait`, else only if free (null if not). */
export type TakeOne = (name: string, options: ResolvedLockOptions, wait: boolean) => Promise<LockHandle | null>;

/**
 * The names of a call on several, checked before any I/O, duplicates (by backend key) collapsed,
 * in the one order every caller takes them in: their backend keys sorted.
 */
export function canonicalNames(names: readonly unknown[], method: string, keyOf: (name: string) => string): NamedKey[] {
  if (names.length === 0) throw new LockKeyError(`${method}: the list of lock names is empty; give at least one name.`, '[]', method);
  const byKey = new Map<string, NamedKey>();
  for (const name of names) {
    assertLockName(name, method);
    const key = keyOf(name);
    if (!byKey.has(key)) byKey.set(key, { name, key });
  }
  return [...byKey.values()].sort((a, b) => (a.key < b.key ? -1 : a.key > b.key ? 1 : 0));
}

/**
 * Several names, all or nothing within one wait budget. They are tried at once (one round trip
 * when all are free); otherwise the taken ones that form a prefix of the canonical order are kept,
 * the others given back, and the rest waited for one after the other in that order, which is what
 * keeps two callers listing the same names in opposite orders from deadlocking. When one is not
 * taken in time, everything taken goes back and the call fails as a whole.
 */
export async function takeMany(names: readonly NamedKey[], options: ResolvedLockOptions, wait: boolean, take: TakeOne): Promise<LockHandle | null> {
  const started = performance.now();
  const tries = await Promise.allSettled(names.map(({ name }) => take(name, options, false)));
  const held: LockHandle[] = [];
  const extra: LockHandle[] = [];
  let failure: { reason: unknown } | undefined;
  tries.forEach((outcome, index) => {
    if (outcome.status === 'rejected') failure ??= { reason: outcome.reason };
    else if (outcome.value && index === held.length && !failure) held.push(outcome.value);
    else if (outcome.value) extra.push(outcome.value);
  });
  if (failure || !wait) {
    if (!failure && held.length === names.length) return LockHandle.of(held);
    await giveBack([...held, ...extra]);
    if (failure) throw failure.reason;
    return null;
  }
  await giveBack(extra);
  try {
    for (let i = held.length; i < names.length; i++) {
      const leftMs = options.waitTimeoutMs === Infinity ? Infinity : Math.max(0, started + options.waitTimeoutMs - performance.now());
      const handle = await take(names[i].name, { ...options, waitTimeoutMs: leftMs }, leftMs > 0);
      if (!handle) throw new LockTimeoutError(names[i].name, Math.round(performance.now() - started));
      held.push(handle);
    }
  } catch (error) {
    await giveBack(held);
    throw error instanceof LockTimeoutError ? new LockTimeoutError(names.map(({ name }) => name).join(', '), Math.round(performance.now() - started)) : error;
  }
  return LockHandle.of(held);
}

function giveBack(handles: readonly LockHandle[]): Promise<unknown> {
  return Promise.all(handles.map((handle) => handle.release()));
}
