import { defineBackend } from '../backend-definition';
import { resolveZooKeeperOptions, type ZooKeeperBackendOptions } from './zookeeper-options';

export const zookeeperBackend = defineBackend<ZooKeeperBackendOptions>({
  type: 'zookeeper',
  validate: (options) => void resolveZooKeeperOptions(options),
  // Imported only when chosen, so an app on another backend never loads this code or the client.
  create: async (options, settings) => (await import('./create-zookeeper-backend')).createZooKeeperBackend(options, settings),
  doctor: async (options, settings) => (await import('./zookeeper-doctor')).doctorZooKeeper(options, settings),
});
