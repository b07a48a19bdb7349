import { etcdSampleBackend } from './etcd.sample-backend';
import { memorySampleBackend } from './memory.sample-backend';
import { postgresSampleBackend } from './postgres.sample-backend';
import { redisSampleBackend } from './redis.sample-backend';
import { redlockSampleBackend } from './redlock.sample-backend';
import type { SampleBackend } from './sample-backend';
import { zookeeperSampleBackend } from './zookeeper.sample-backend';

/** The backends the sample app can run on (`--backend NAME`). Backends add themselves here. */
export const SAMPLE_BACKENDS: Record<string, SampleBackend> = {
  memory: memorySampleBackend,
  etcd: etcdSampleBackend,
  redis: redisSampleBackend,
  redlock: redlockSampleBackend,
  zookeeper: zookeeperSampleBackend,
  postgres: postgresSampleBackend,
};

export function sampleBackend(name: string): SampleBackend {
  const backend = SAMPLE_BACKENDS[name];
  if (!backend) {
    throw new Error(`Unknown --backend "${name}"; choose one of: ${Object.keys(SAMPLE_BACKENDS).join(', ')}.`);
  }
  return backend;
}
