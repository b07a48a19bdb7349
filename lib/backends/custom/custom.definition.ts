import { LockConfigError } from '../../errors';
import { defineBackend } from '../backend-definition';
import { Diagnosis } from '../backend-doctor';
import type { LockBackend } from '../lock-backend.interface';
import { allowOnlyFields } from '../option-checks';

/**
 * Bring your own implementation of the backend contract. The module does not close it: the
 * code that made it owns its lifecycle, as with a client passed to the other backends.
 */
export interface CustomBackendOptions {
  type: 'custom';
  backend: LockBackend;
}

const BACKEND_METHODS = ['acquire', 'tryAcquire', 'renew', 'release', 'close'] as const;

export const customBackend = defineBackend<CustomBackendOptions>({
  type: 'custom',
  validate: (options) => {
    allowOnlyFields('custom', options, ['backend']);
    const backend = options.backend as unknown as Record<string, unknown> | null;
    if (typeof backend !== 'object' || backend === null || !BACKEND_METHODS.every((method) => typeof backend[method] === 'function')) {
      throw new LockConfigError('backend.backend', `must implement LockBackend (${BACKEND_METHODS.join(', ')}).`);
    }
  },
  create: (options) => options.backend,
  doctor: async (options) => {
    const diagnosis = new Diagnosis('custom', options.backend.address);
    diagnosis.note(`a custom backend (${options.backend.name}): the doctor has no checks for it`);
    return diagnosis.report();
  },
});
