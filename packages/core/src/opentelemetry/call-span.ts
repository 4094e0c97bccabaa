/**
 * An outgoing call's own span — the one OpenTelemetry's undici, pg, mysql2 or ioredis instrumentation makes for
 * it — carries the call's budget, the moment it was cut off, and whether the server confirmed the stop.
 *
 * The instrumentations make their spans inside the driver, where no adapter can reach them, and only a span
 * processor sees every span start. So an adapter runs its driver call with the call in OpenTelemetry's context
 * (`runWithCall`); `DeadlineSpanProcessor` (`@deadline/opentelemetry`), seeing a span start there, hands it to
 * the call. Without a registered processor `runWithCall` is a plain call: one read of a global counter.
 */
import { hasCallCancelSubscribers } from '../diagnostics.js';
import { openTelemetry } from './api.js';

/** How many `DeadlineSpanProcessor`s are live, process-wide (two copies of this package share it). */
const kProcessors = Symbol.for('@deadline/core/call-span-processors@1');
type WithProcessors = typeof globalThis & { [kProcessors]?: number };

/**
 * The key under which the call rides in OpenTelemetry's context, shared with the processor. @internal
 */
export const OUTGOING_CALL_KEY: symbol = Symbol.for('@deadline/core/outgoing-call');

/**
 * Counts a processor in; returns the function that counts it out. While one is counted, adapters put their
 * calls in OpenTelemetry's context. @internal
 */
export function registerCallSpans(): () => void {
  const global = globalThis as WithProcessors;
  global[kProcessors] = (global[kProcessors] ?? 0) + 1;
  let registered = true;
  return () => {
    if (!registered) return;
    registered = false;
    global[kProcessors] = Math.max(0, (global[kProcessors] ?? 1) - 1);
  };
}

/** Whether a processor is live. */
function processorsLive(): boolean {
  return ((globalThis as WithProcessors)[kProcessors] ?? 0) > 0;
}

/**
 * Whether what a call learns of its stop is wanted: by a processor (for the call's span), or by a subscriber to
 * `deadline:call:cancel` (metrics). An adapter that must listen for the server's confirmation of a stop (pg's 57014)
 * listens then. @internal
 */
export function callSpansWanted(): boolean {
  return processorsLive() || hasCallCancelSubscribers();
}

/**
 * Runs the driver call `fn` with `call` in OpenTelemetry's context, when a processor wants call spans; as is,
 * otherwise. @internal
 */
export function runWithCall<R>(call: object, fn: () => R): R {
  if (!processorsLive()) return fn();
  const otel = openTelemetry();
  if (otel === undefined) return fn();
  return otel.context.with(otel.context.active().setValue(OUTGOING_CALL_KEY, call), fn);
}
