import { LockConfigError } from '../errors';

/**
 * Loads an optional peer dependency (a backend's client library) only when that backend is
 * chosen, with an error that says what to install when it is missing.
 */
export function loadPeer<T>(packageName: string, backendType: string): T {
  return requirePeer<T>(packageName, 'backend.type', `backend '${backendType}'`);
}

/** As loadPeer, for another option that needs an optional package (`metrics`: prom-client). */
export function requirePeer<T>(packageName: string, option: string, feature: string): T {
  const loaded = optionalPeer<T>(packageName);
  if (loaded === undefined) throw new LockConfigError(option, `${feature} needs the "${packageName}" package: npm install ${packageName}`);
  return loaded;
}

/** The package, or undefined when it is not installed (an error inside it is not hidden). */
export function optionalPeer<T>(packageName: string): T | undefined {
  try {
    return require(packageName) as T;
  } catch (error) {
    if ((error as NodeJS.ErrnoException).code === 'MODULE_NOT_FOUND' && String((error as Error).message).includes(packageName)) return undefined;
    throw error;
  }
}
