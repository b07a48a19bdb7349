import type { ResolvedModuleOptions } from '../lock-options';
import { recordLockMetrics } from './lock-metrics';
import { traceLockAcquisitions } from './lock-tracing';

/**
 * The subscribers the module's options ask for (`metrics`, `tracing`), started when the
 * application initialises and stopped after its locks were released at shutdown.
 */
export class LockInstrumentation {
  private stops: Array<() => void> = [];

  constructor(private readonly options: Pick<ResolvedModuleOptions, 'metricsRegistry' | 'tracing'>) {}

  /** Throws LockConfigError when `metrics` is asked for and prom-client is not installed. */
  start(): void {
    if (this.options.metricsRegistry !== undefined) this.stops.push(recordLockMetrics(this.options.metricsRegistry));
    const stopTracing = this.options.tracing ? traceLockAcquisitions() : undefined;
    if (stopTracing) this.stops.push(stopTracing);
  }

  stop(): void {
    for (const stop of this.stops) stop();
    this.stops = [];
  }
}
