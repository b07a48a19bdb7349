import { defineBackend } from '../backend-definition';
import { validateRedlockOptions, type RedlockBackendOptions } from './redlock-options';

export const redlockBackend = defineBackend<RedlockBackendOptions>({
  type: 'redlock',
  validate: validateRedlockOptions,
  // Imported only when chosen, so an app on another backend never loads this code or ioredis.
  create: async (options, settings) => (await import('./redlock.backend')).createRedlockBackend(options, settings),
  doctor: async (options, settings) => (await import('./redlock-doctor')).doctorRedlock(options, settings),
});
