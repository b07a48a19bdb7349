import type { LockBackend } from '../../lib';
import { MemoryLockBackend } from '../../lib/backends/memory/memory.backend';

/**
 * What a built-in backend tells the core of its own release (BuiltInBackend): not true of calls
 * replaced here, so the wrapper claims none of it, as a custom backend would.
 */
const BUILT_IN_CLAIMS: ReadonlySet<PropertyKey> = new Set(['boundedRelease']);

/**
 * A real memory backend with some calls replaced, to make the service meet a server that
 * refuses renewals, fails, or answers slowly. `inner` is the backend the overrides may call on.
 */
export function overriddenBackend(overrides: (inner: LockBackend) => Partial<LockBackend>, inner: LockBackend = new MemoryLockBackend()): LockBackend {
  const replaced = overrides(inner);
  return new Proxy(inner, {
    get(target, property, receiver) {
      if (property in replaced) return replaced[property as keyof LockBackend];
      if (BUILT_IN_CLAIMS.has(property)) return undefined;
      const value = Reflect.get(target, property, receiver);
      return typeof value === 'function' ? value.bind(target) : value;
    },
  });
}
