import { defineBackend } from '../backend-definition';
import { allowOnlyFields } from '../option-checks';
import { MemoryLockBackend } from './memory.backend';

/** `{ type: 'memory' }`: the embedded in-process backend, the default. */
export interface MemoryBackendOptions {
  type: 'memory';
}

export const memoryBackend = defineBackend<MemoryBackendOptions>({
  type: 'memory',
  validate: (options) => allowOnlyFields('memory', options, []),
  create: () => new MemoryLockBackend(),
});
