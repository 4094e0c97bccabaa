/**
 * With OpenTelemetry in use, a detached task and a job attempt are spans of their own: a child of the span that
 * was active where the task was started (the request's), or of the span that enqueued the job. The work runs
 * with its span active, so what it calls downstream nests under it, and its context's trace is the span's, so
 * its log lines carry the span's ids. Without `@opentelemetry/api`, or without a tracer provider (the API's
 * no-op tracer makes no valid span of its own), there is no span and the trace is this library's own.
 */
import { DeadlineExceededError, type StopReason, type TraceContext } from '@deadline/core';
import {
  activeSpan,
  DeadlineAttributes,
  DeadlineEvents,
  type OtelApi,
  type OtelAttributes,
  type OtelContext,
  type OtelSpan,
  registeredOpenTelemetry,
  traceOfSpan,
} from '@deadline/core/internal';

/** OpenTelemetry's `SpanKind` values used here. */
export const SpanKind = { Internal: 0, Consumer: 4 } as const;
/** `SpanStatusCode.ERROR`. */
const STATUS_ERROR = 2;

/** A started span, the trace the work's context gets from it, and the OpenTelemetry context to run it in. @internal */
export interface WorkSpan {
  readonly span: OtelSpan;
  readonly trace: TraceContext;
  readonly context: OtelContext;
  readonly otel: OtelApi;
}

/**
 * Starts the span of a piece of work. `parent`: the trace it continues when no OpenTelemetry span is active
 * here (the request's own trace, or the one a job carried); its ids then become the span's parent, so the span
 * joins that trace rather than starting another.
 * @internal
 */
export function startWorkSpan(
  name: string,
  kind: number,
  parent:
    | { traceId: string; spanId: string; flags: number; tracestate: string | undefined; remote: boolean }
    | undefined,
  attributes: OtelAttributes,
): WorkSpan | undefined {
  const otel = registeredOpenTelemetry();
  if (otel === undefined) return undefined;
  let parentContext = otel.context.active();
  if (parent !== undefined && (parent.remote || activeSpan() === undefined)) {
    const traceState = parent.tracestate === undefined ? undefined : otel.createTraceState?.(parent.tracestate);
    parentContext = otel.trace.setSpanContext(parent.remote ? otel.ROOT_CONTEXT : parentContext, {
      traceId: parent.traceId,
      spanId: parent.spanId,
      traceFlags: parent.flags,
      traceState,
      isRemote: parent.remote,
    });
  }
  const span = otel.trace.getTracer('@deadline/jobs').startSpan(name, { kind, attributes }, parentContext);
  // The no-op tracer of an API without a provider hands back the parent's context, or an invalid one: no span.
  // (A provider's sampler that drops it still draws a span id of its own, which then travels on.)
  const made = span.spanContext();
  if (!otel.trace.isSpanContextValid(made) || made.spanId === otel.trace.getSpan(parentContext)?.spanContext().spanId) {
    return undefined;
  }
  return { span, trace: traceOfSpan(span), context: otel.trace.setSpan(parentContext, span), otel };
}

/** Runs `fn` with the work's span active (as is, without one). @internal */
export function runInSpan<R>(work: WorkSpan | undefined, fn: () => R): R {
  return work === undefined ? fn() : work.otel.context.with(work.context, fn);
}

/** Marks the moment the work's deadline fired, or it was cancelled. @internal */
export function markStop(work: WorkSpan, reason: StopReason, elapsedMs: number): void {
  if (reason instanceof DeadlineExceededError) {
    work.span.addEvent(DeadlineEvents.Exceeded, { [DeadlineAttributes.ElapsedMs]: Math.round(elapsedMs) });
  } else if (reason.reason !== 'context-ended') {
    work.span.addEvent(DeadlineEvents.Cancelled, {
      [DeadlineAttributes.ElapsedMs]: Math.round(elapsedMs),
      [DeadlineAttributes.CancelReason]: reason.reason,
    });
  }
}

/** Ends the work's span with its outcome (`ok`, `deadline_exceeded`, `cancelled`, `error`). @internal */
export function endWorkSpan(work: WorkSpan, outcome: string, error: unknown): void {
  work.span.setAttribute(DeadlineAttributes.Outcome, outcome);
  if (outcome !== 'ok') {
    if (error !== undefined) work.span.recordException(error instanceof Error ? error : String(error));
    work.span.setStatus({ code: STATUS_ERROR, message: error instanceof Error ? error.message : String(error) });
  }
  work.span.end();
}
