import type { LockBackend } from '../../lib';
import { MemoryLockBackend } from '../../lib/backends/memory/memory.backend';

/**
 * A real memory backend with some calls replaced, to make the service meet a server that
 * refuses renewals, fails, or answers slowly. `inner` is the backend the overrides may call on.
 */
export function overriddenBackend(overrides: (inner: LockBackend) => Partial<LockBackend>, inner: LockBackend = new MemoryLockBackend()): LockBackend {
  const replaced = overrides(inner);
  return new Proxy(inner, {
    get(target, property, receiver) {
      if (property in replaced) return replaced[property as keyof LockBackend];
      const value = Reflect.get(target, property, receiver);
      return typeof value === 'function' ? value.bind(target) : value;
    },
  });
}
