import type { LockBackend } from '../../lib';

export type BackendCalls = Record<'acquire' | 'tryAcquire' | 'renew' | 'release' | 'inspect' | 'forceRelease', number>;

/** Wraps a backend to count the calls that reach it: re-entrancy and key errors must make none. A method the backend lacks stays absent. */
export function countingBackend(inner: LockBackend): { backend: LockBackend; calls: BackendCalls } {
  const calls: BackendCalls = { acquire: 0, tryAcquire: 0, renew: 0, release: 0, inspect: 0, forceRelease: 0 };
  const backend = new Proxy(inner, {
    get(target, property, receiver) {
      const value = Reflect.get(target, property, receiver);
      if (typeof value !== 'function') return value;
      if (property in calls) {
        return (...args: unknown[]) => {
          calls[property as keyof BackendCalls]++;
          return Reflect.apply(value, target, args);
        };
      }
      return value.bind(target);
    },
  });
  return { backend, calls };
}
