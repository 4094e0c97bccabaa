/**
 * Is OpenTelemetry in charge of the trace here? When it is, its propagator writes `traceparent` on every call
 * its instrumentations see (instrumentation-undici appends its own after every dispatcher interceptor), so a
 * second one from this library would make Node join the two into `"a, b"` — a value OpenTelemetry's parser
 * rejects, starting a new trace at every hop. And the request's trace is the span OpenTelemetry made for it.
 */
import { type OtelSpan, openTelemetry, openTelemetryRegistry } from './api.js';

/**
 * `@opentelemetry/core`'s RPC metadata key (`createContextKey` is `Symbol.for(description)`): the http
 * instrumentation keeps the request's server span there, while framework instrumentations make their own
 * per-middleware spans the active one (express's "middleware - …").
 */
const RPC_METADATA = Symbol.for('OpenTelemetry SDK Context Key RPC_METADATA');

/**
 * The registry is read first (api.ts): without registrations the API is not loaded at all, and with the API
 * but no SDK a check costs ~5 ns instead of ~40 (the no-op propagator's `fields()` allocates).
 */
const registry = openTelemetryRegistry;

/**
 * Whether OpenTelemetry propagates the trace here: a registered propagator handles `traceparent`, or a span
 * with a valid context is active. Then this library writes no `traceparent`/`tracestate` of its own. False at
 * the cost of one property read when nothing is registered with `@opentelemetry/api` (installed or not).
 * @internal
 */
export function openTelemetryPropagates(): boolean {
  const registered = registry();
  if (registered === undefined) return false;
  const otel = openTelemetry();
  if (otel === undefined) return false;
  if (registered.propagation !== undefined && otel.propagation.fields().includes('traceparent')) return true;
  if (registered.context === undefined) return false;
  const span = otel.trace.getSpan(otel.context.active());
  return span !== undefined && otel.trace.isSpanContextValid(span.spanContext());
}

/**
 * The span OpenTelemetry made for the request being served now: the server span the http instrumentation
 * started (it outlives every middleware span), else the active span; `undefined` without a valid one.
 * @internal
 */
export function activeRequestSpan(): OtelSpan | undefined {
  // Checked here, not only inside: a service without OpenTelemetry makes no call per request (every request
  // starts here), and the call never made leaves the request's start hook room to inline the rest (V8 spends a
  // per-function budget of bytecode on what it inlines).
  return registry()?.context === undefined ? undefined : validActiveSpan(true);
}

/**
 * The active OpenTelemetry span, if its context is valid: the trace for work started outside any request.
 * @internal
 */
export function activeSpan(): OtelSpan | undefined {
  return validActiveSpan(false);
}

/** The active span (or, `ofRequest`, the request's server span) if a context manager is registered and it is valid. */
function validActiveSpan(ofRequest: boolean): OtelSpan | undefined {
  if (registry()?.context === undefined) return undefined;
  const otel = openTelemetry();
  if (otel === undefined) return undefined;
  const active = otel.context.active();
  const metadata = ofRequest ? (active.getValue(RPC_METADATA) as { span?: OtelSpan } | undefined) : undefined;
  const span = metadata?.span ?? otel.trace.getSpan(active);
  return span !== undefined && otel.trace.isSpanContextValid(span.spanContext()) ? span : undefined;
}
