import { monitorEventLoopDelay } from 'node:perf_hooks';
import type { ITxnRequest } from 'etcd3';
import type { AcquireRequest } from '../../../lib';

/** Helpers shared by the etcd backend tests. */

export const never: AbortSignal = new AbortController().signal;

/** A backend request with a lease long enough never to matter. */
export function request(key: string, owner: string, signal: AbortSignal = never): AcquireRequest {
  return { key, owner, ttlMs: 30_000, signal };
}

/** `promise`, or a failure naming `what` after `ms`: a stuck queue fails the test, not hangs it. */
export function within<T>(promise: Promise<T>, ms: number, what: string): Promise<T> {
  let timer: NodeJS.Timeout;
  const timeout = new Promise<never>((_, reject) => (timer = setTimeout(() => reject(new Error(`${what}: nothing after ${ms} ms`)), ms)));
  return Promise.race([promise, timeout]).finally(() => clearTimeout(timer));
}

/** What a transaction of the backend does: put (enqueue, try-lock), delete (release, leave) or read. */
export function txnKind(request: ITxnRequest): 'put' | 'delete' | 'read' {
  const ops = [...(request.success ?? []), ...(request.failure ?? [])];
  if (ops.some((op) => op.request_put)) return 'put';
  return ops.some((op) => op.request_delete_range) ? 'delete' : 'read';
}

/**
 * Measures how late this process's timers ran (the longest event-loop delay, sampled every 10 ms)
 * from now until `stop()`. On the shared 2-core test machine a timer can fire a few hundred ms
 * late; a bound on when a timer-driven signal fires is asserted as the property's own bound plus
 * this measured lateness, so it holds under load and still fails when the property breaks (a
 * signal a whole ttl late, say).
 */
export function timerLateness(): { stop(): number } {
  const histogram = monitorEventLoopDelay({ resolution: 10 });
  histogram.enable();
  return {
    stop() {
      histogram.disable();
      return Math.ceil(histogram.max / 1e6);
    },
  };
}
