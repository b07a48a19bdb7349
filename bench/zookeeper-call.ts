import type { Exception } from 'node-zookeeper-client';

/** A node-zookeeper-client call with a `(error, value)` callback, as a promise. */
export function call<T>(start: (done: (error: Error | Exception | null, value: T) => void) => void): Promise<T> {
  return new Promise<T>((resolve, reject) => start((error, value) => (error ? reject(error) : resolve(value))));
}
