/**
 * What a published message carries. A request — someone waits for its reply — carries the budget as HTTP does
 * (`x-request-deadline`: remaining − margin), the same deadline on the publisher's wall clock
 * (`x-request-deadline-at`, from which its responder learns how long it waited on the way), and the trace. An event
 * outlives the request that sent it: the trace only, as a queued job.
 */
import { activeSpan, addTraceHeaders, openTelemetryPropagates, type Scope, traceOfSpan } from '@deadline/core/internal';
import {
  formatDeadlineAt,
  formatTraceparent,
  REQUEST_DEADLINE_AT_HEADER,
  REQUEST_DEADLINE_HEADER,
} from '@deadline/core/wire';
import type { NatsHeadersLike } from './nats-types.js';
import { OutgoingHeaders } from './outgoing-headers.js';

/** `base` (the app's headers) with a request's: `callHeaders` (an `OutgoingCall`'s) and the wall-clock deadline. @internal */
export function withBudget(
  base: NatsHeadersLike | undefined,
  callHeaders: Readonly<Record<string, string>>,
  timeoutMs: number | undefined,
): OutgoingHeaders {
  const headers = new OutgoingHeaders(base);
  for (const name of Object.keys(callHeaders)) headers.replace(name, callHeaders[name] as string);
  if (callHeaders.traceparent === undefined) {
    const trace = traceHeaders(undefined);
    for (const name of Object.keys(trace)) headers.replace(name, trace[name] as string);
  }
  if (timeoutMs !== undefined && callHeaders[REQUEST_DEADLINE_HEADER] !== undefined) {
    headers.replace(REQUEST_DEADLINE_AT_HEADER, formatDeadlineAt(timeoutMs));
  }
  return headers;
}

/** `base` with the trace of `scope`; `base` itself when there is no trace to add (nothing copied). @internal */
export function withTraceHeaders(
  base: NatsHeadersLike | undefined,
  scope: Scope | undefined,
): NatsHeadersLike | undefined {
  const trace = traceHeaders(scope);
  const names = Object.keys(trace);
  if (names.length === 0) return base;
  const headers = new OutgoingHeaders(base);
  for (const name of names) headers.replace(name, trace[name] as string);
  return headers;
}

/**
 * The trace headers of a message sent now. With OpenTelemetry the core leaves `traceparent` to its instrumentation,
 * as HTTP's writes it; but nothing of OpenTelemetry's writes NATS headers, so the message is made the child of the
 * span active where it is sent, as a queued job is (`@deadline/jobs`). Without it: the context's own trace.
 */
function traceHeaders(scope: Scope | undefined): Record<string, string> {
  if (!openTelemetryPropagates()) return scope === undefined ? {} : addTraceHeaders(scope, {});
  const span = activeSpan();
  if (span === undefined) return {};
  const trace = traceOfSpan(span);
  const headers: Record<string, string> = { traceparent: formatTraceparent(trace) };
  if (trace.tracestate !== undefined) headers.tracestate = trace.tracestate;
  return headers;
}
