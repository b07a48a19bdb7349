import { defineBackend } from '../backend-definition';
import { validatePostgresOptions, type PostgresBackendOptions } from './postgres-options';

export const postgresBackend = defineBackend<PostgresBackendOptions>({
  type: 'postgres',
  validate: validatePostgresOptions,
  // Imported only when chosen, so an app on another backend never loads this code or pg.
  create: async (options, settings) => (await import('./postgres.backend')).createPostgresBackend(options, settings),
  doctor: async (options, settings) => (await import('./postgres-doctor')).doctorPostgres(options, settings),
});
