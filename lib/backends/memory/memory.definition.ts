import { defineBackend } from '../backend-definition';
import { Diagnosis } from '../backend-doctor';
import { allowOnlyFields } from '../option-checks';
import { MemoryLockBackend } from './memory.backend';

/** `{ type: 'memory' }`: the embedded in-process backend, the default. */
export interface MemoryBackendOptions {
  type: 'memory';
}

export const memoryBackend = defineBackend<MemoryBackendOptions>({
  type: 'memory',
  validate: (options) => allowOnlyFields('memory', options, []),
  create: (_options, settings) => new MemoryLockBackend(undefined, settings.holderDescription),
  doctor: async () => {
    const diagnosis = new Diagnosis('memory');
    diagnosis.note('the memory backend is process-local: there is no server to check, and its locks exclude callers in this process only');
    return diagnosis.report();
  },
});
