import { LockConfigError } from '../errors';

/**
 * Loads an optional peer dependency (a backend's client library) only when that backend is
 * chosen, with an error that says what to install when it is missing.
 */
export function loadPeer<T>(packageName: string, backendType: string): T {
  try {
    return require(packageName) as T;
  } catch (error) {
    if ((error as NodeJS.ErrnoException).code === 'MODULE_NOT_FOUND' && String((error as Error).message).includes(packageName)) {
      throw new LockConfigError('backend.type', `backend '${backendType}' needs the "${packageName}" package: npm install ${packageName}`);
    }
    throw error;
  }
}
