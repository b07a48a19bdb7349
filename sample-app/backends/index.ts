import { memorySampleBackend } from './memory.sample-backend';
import type { SampleBackend } from './sample-backend';

/** The backends the sample app can run on (`--backend NAME`). Backends add themselves here. */
export const SAMPLE_BACKENDS: Record<string, SampleBackend> = {
  memory: memorySampleBackend,
};

export function sampleBackend(name: string): SampleBackend {
  const backend = SAMPLE_BACKENDS[name];
  if (!backend) {
    throw new Error(`Unknown --backend "${name}"; choose one of: ${Object.keys(SAMPLE_BACKENDS).join(', ')}.`);
  }
  return backend;
}
