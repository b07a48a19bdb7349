import type * as PromClient from 'prom-client';
import { requirePeer } from '../backends/load-peer';
import {
  lockChannels,
  type AcquiredMessage,
  type AcquireMessage,
  type LostMessage,
  type ReleasedMessage,
  type TimedOutMessage,
} from '../diagnostics/lock-channels';
import { LockTimeoutError } from '../errors';
import type { MetricsRegistry } from '../lock-options';
import { SharedSubscriptions } from './shared-subscription';

/** Acquisition waits span a free lock (sub-millisecond) to long queues; holds, quick jobs to long ones. */
const SECONDS_BUCKETS = [0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60];

const subscriptions = new SharedSubscriptions<object>();

/**
 * Records the library's diagnostics-channel events as Prometheus metrics in `registry` (null:
 * prom-client's default registry), labelled by backend and mode (write, read, permit). No lock
 * name is a label: names are unbounded (one per sku, per user), and every label value is a time series. Returns the stop function.
 */
export function recordLockMetrics(registry: MetricsRegistry | null): () => void {
  const client = requirePeer<typeof PromClient>('prom-client', 'metrics', 'metrics');
  const target = registry ?? client.register;
  return subscriptions.use(target, () => subscribe(lockMetricsIn(client, target as unknown as PromClient.Registry)));
}

interface LockMetrics {
  acquire: PromClient.Histogram<'backend' | 'mode' | 'outcome'>;
  hold: PromClient.Histogram<'backend' | 'mode'>;
  held: PromClient.Gauge<'backend' | 'mode'>;
  waiting: PromClient.Gauge<'backend' | 'mode'>;
  lost: PromClient.Counter<'backend' | 'mode' | 'reason'>;
}

/** The metrics in `registry`, made there unless an earlier application of this process did. */
function lockMetricsIn(client: typeof PromClient, registry: PromClient.Registry): LockMetrics {
  const registers = [registry];
  const existing = <T>(name: string) => registry.getSingleMetric(name) as T | undefined;
  return {
    acquire:
      existing('distributed_lock_acquire_seconds') ??
      new client.Histogram({
        name: 'distributed_lock_acquire_seconds',
        help: 'Time to acquire a lock (waiting included), by outcome: acquired, timeout, skipped, error.',
        labelNames: ['backend', 'mode', 'outcome'],
        buckets: SECONDS_BUCKETS,
        registers,
      }),
    hold:
      existing('distributed_lock_hold_seconds') ??
      new client.Histogram({
        name: 'distributed_lock_hold_seconds',
        help: 'Time a lock was held, from its grant to its release.',
        labelNames: ['backend', 'mode'],
        buckets: SECONDS_BUCKETS,
        registers,
      }),
    held:
      existing('distributed_lock_held') ??
      new client.Gauge({ name: 'distributed_lock_held', help: 'Locks this process holds now.', labelNames: ['backend', 'mode'], registers }),
    waiting:
      existing('distributed_lock_waiting') ??
      new client.Gauge({ name: 'distributed_lock_waiting', help: 'Acquisitions of this process waiting for the backend now.', labelNames: ['backend', 'mode'], registers }),
    lost:
      existing('distributed_lock_lost_total') ??
      new client.Counter({ name: 'distributed_lock_lost_total', help: 'Locks lost before their holder released them, by reason.', labelNames: ['backend', 'mode', 'reason'], registers }),
  };
}

const ignore = (): void => undefined;

function subscribe(metrics: LockMetrics): () => void {
  const seconds = (ms: number) => ms / 1000;
  const onAcquired = (message: unknown) => {
    const { backend, mode, waitedMs } = message as AcquiredMessage;
    metrics.acquire.observe({ backend, mode, outcome: 'acquired' }, seconds(waitedMs));
    metrics.held.inc({ backend, mode });
  };
  const onTimedOut = (message: unknown) => {
    const { backend, mode, waitedMs } = message as TimedOutMessage;
    metrics.acquire.observe({ backend, mode, outcome: 'timeout' }, seconds(waitedMs));
  };
  const onSkipped = (message: unknown) => {
    const { backend, mode, waitedMs } = message as TimedOutMessage;
    metrics.acquire.observe({ backend, mode, outcome: 'skipped' }, seconds(waitedMs));
  };
  const onReleased = (message: unknown) => {
    const { backend, mode, heldMs, wasLost } = message as ReleasedMessage;
    metrics.hold.observe({ backend, mode }, seconds(heldMs));
    if (!wasLost) metrics.held.dec({ backend, mode });
  };
  const onLost = (message: unknown) => {
    const { backend, mode, reason } = message as LostMessage;
    metrics.lost.inc({ backend, mode, reason });
    metrics.held.dec({ backend, mode });
  };
  const tracing = {
    end: ignore,
    asyncStart: ignore,
    start: (message: AcquireMessage) => metrics.waiting.inc({ backend: message.backend, mode: message.mode }),
    asyncEnd: (message: AcquireMessage) => metrics.waiting.dec({ backend: message.backend, mode: message.mode }),
    // A timeout is counted by its own channel, as timeout or skipped.
    error: (message: AcquireMessage & { error?: unknown }) => {
      if (!(message.error instanceof LockTimeoutError)) metrics.acquire.observe({ backend: message.backend, mode: message.mode, outcome: 'error' }, seconds(message.waitedMs ?? 0));
    },
  };
  lockChannels.acquired.subscribe(onAcquired);
  lockChannels.timedOut.subscribe(onTimedOut);
  lockChannels.skipped.subscribe(onSkipped);
  lockChannels.released.subscribe(onReleased);
  lockChannels.lost.subscribe(onLost);
  lockChannels.acquire.subscribe(tracing);
  return () => {
    lockChannels.acquired.unsubscribe(onAcquired);
    lockChannels.timedOut.unsubscribe(onTimedOut);
    lockChannels.skipped.unsubscribe(onSkipped);
    lockChannels.released.unsubscribe(onReleased);
    lockChannels.lost.unsubscribe(onLost);
    lockChannels.acquire.unsubscribe(tracing);
  };
}
