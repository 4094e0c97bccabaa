/**
 * A context's trace when OpenTelemetry made the span: the span's own ids, so that every log line written in
 * the context carries the ids the exported spans carry, and the span itself, so that the server adapter can
 * put the deadline on it and detached work can start its spans under it.
 */
import { parseTraceparent, type TraceContext, traceJson } from '../trace.js';
import { type OtelSpan, openTelemetry } from './api.js';

/** A property key, not a class check: two copies of this package in one app must recognise each other's. */
const kSpan = Symbol.for('@deadline/core/opentelemetry-span');

class SpanTrace implements TraceContext {
  readonly traceId: string;
  readonly spanId: string;
  readonly parentId: string | undefined;
  readonly flags: number;
  readonly [kSpan]: OtelSpan;
  #tracestate: string | undefined | null = null;

  constructor(span: OtelSpan, incomingTraceparent: unknown) {
    const context = span.spanContext();
    this.traceId = context.traceId;
    this.spanId = context.spanId;
    this.flags = context.traceFlags;
    this[kSpan] = span;
    // The caller's span, when the request's traceparent belongs to the same trace (OpenTelemetry continued it).
    const incoming = parseTraceparent(incomingTraceparent);
    this.parentId = incoming?.traceId === context.traceId ? incoming.parentId : undefined;
  }

  get tracestate(): string | undefined {
    if (this.#tracestate === null) {
      const serialized = this[kSpan].spanContext().traceState?.serialize();
      this.#tracestate = serialized === undefined || serialized === '' ? undefined : serialized;
    }
    return this.#tracestate;
  }

  toJSON(): Record<string, unknown> {
    return traceJson(this);
  }
}

/**
 * The trace of an OpenTelemetry span. `incomingTraceparent`, when given, supplies `parentId` if it belongs to
 * the same trace.
 * @internal
 */
export function traceOfSpan(span: OtelSpan, incomingTraceparent?: unknown): TraceContext {
  return new SpanTrace(span, incomingTraceparent);
}

/**
 * The OpenTelemetry span behind a context's trace, when OpenTelemetry made it.
 * @internal
 */
export function spanOfTrace(trace: TraceContext | undefined): OtelSpan | undefined {
  return trace === undefined ? undefined : (trace as { [kSpan]?: OtelSpan })[kSpan];
}

/**
 * Runs `fn` with the span behind `trace` as OpenTelemetry's active span, when there is one. For lines written
 * away from their request's own async flow — a call's end, heard on a pooled socket that another request
 * opened — so that what reads the active span then (the pino instrumentation's `trace_id`) sees the request's.
 * @internal
 */
export function runInSpanOf<R>(trace: TraceContext | undefined, fn: () => R): R {
  const span = spanOfTrace(trace);
  const otel = span === undefined ? undefined : openTelemetry();
  if (span === undefined || otel === undefined) return fn();
  return otel.context.with(otel.trace.setSpan(otel.context.active(), span), fn);
}
