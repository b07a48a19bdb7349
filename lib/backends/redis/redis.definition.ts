import { defineBackend } from '../backend-definition';
import { validateRedisOptions, type RedisBackendOptions } from './redis-options';

export const redisBackend = defineBackend<RedisBackendOptions>({
  type: 'redis',
  validate: validateRedisOptions,
  // Imported only when chosen, so an app on another backend never loads this code or ioredis.
  create: async (options, settings) =>
    options.protocol === 'plain'
      ? (await import('./plain/redis-plain.backend')).createRedisPlainBackend(options, settings)
      : (await import('./redis.backend')).createRedisBackend(options, settings),
  doctor: async (options, settings) => (await import('./redis-doctor')).doctorRedis(options, settings),
});
