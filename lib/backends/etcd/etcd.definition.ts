import { defineBackend } from '../backend-definition';
import { validateEtcdOptions, type EtcdBackendOptions } from './etcd-options';

export const etcdBackend = defineBackend<EtcdBackendOptions>({
  type: 'etcd',
  validate: validateEtcdOptions,
  // Imported only when chosen, so an app on another backend never loads this code or etcd3.
  create: async (options, settings) =>
    options.protocol === 'lock-api'
      ? (await import('./lock-api/etcd-lock-api.backend')).createEtcdLockApiBackend(options, settings)
      : (await import('./etcd.backend')).createEtcdBackend(options, settings),
  doctor: async (options, settings) => (await import('./etcd-doctor')).doctorEtcd(options, settings),
});
