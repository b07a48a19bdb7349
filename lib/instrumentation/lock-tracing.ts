import type * as OpenTelemetry from '@opentelemetry/api';
import { optionalPeer } from '../backends/load-peer';
import { lockChannels, type AcquireMessage } from '../diagnostics/lock-channels';
import { SharedSubscriptions } from './shared-subscription';

const subscriptions = new SharedSubscriptions<object>();
const ignore = (): void => undefined;

/**
 * A `lock.acquire` span per acquisition that goes to the backend, child of the caller's active
 * context, when `@opentelemetry/api` is installed (without a registered SDK its spans cost
 * little and record nothing). Returns the stop function, or undefined without the package.
 */
export function traceLockAcquisitions(): (() => void) | undefined {
  const api = optionalPeer<typeof OpenTelemetry>('@opentelemetry/api');
  if (!api) return undefined;
  return subscriptions.use(api, () => subscribe(api));
}

function subscribe(api: typeof OpenTelemetry): () => void {
  const tracer = api.trace.getTracer('nest-distributed-lock');
  const spans = new WeakMap<AcquireMessage, OpenTelemetry.Span>();
  const handlers = {
    // Published synchronously in the caller's async context: the active span there is the parent.
    start: (message: AcquireMessage) => {
      const attributes = { 'lock.name': message.name, 'lock.backend': message.backend, 'lock.mode': message.mode, 'lock.wait': message.wait };
      spans.set(message, tracer.startSpan('lock.acquire', { kind: api.SpanKind.INTERNAL, attributes }, api.context.active()));
    },
    end: ignore,
    asyncStart: ignore,
    error: (message: AcquireMessage & { error?: unknown }) => {
      const span = spans.get(message);
      if (!span) return;
      const error = message.error;
      span.recordException(error instanceof Error ? error : String(error));
      span.setStatus({ code: api.SpanStatusCode.ERROR, message: error instanceof Error ? error.message : String(error) });
    },
    asyncEnd: (message: AcquireMessage) => {
      const span = spans.get(message);
      if (!span) return;
      spans.delete(message);
      if (message.waitedMs !== undefined) span.setAttribute('lock.waited_ms', Math.round(message.waitedMs * 1000) / 1000);
      // Attribute values cannot be bigints; the decimal string keeps every digit.
      if (message.fencingToken !== undefined) span.setAttribute('lock.fencing_token', message.fencingToken.toString());
      span.setAttribute('lock.acquired', message.fencingToken !== undefined);
      span.end();
    },
  };
  lockChannels.acquire.subscribe(handlers);
  return () => lockChannels.acquire.unsubscribe(handlers);
}
