/**
 * Everything an outgoing call needs from the current context, computed once right before it is sent (and
 * again for every retry attempt, so no attempt reuses a stale budget): its timeout, and the headers that carry
 * the remaining budget and the trace to the next hop. Shared by every transport adapter.
 */
import { publishPropagate } from './diagnostics.js';
import { openTelemetryPropagates } from './opentelemetry/active.js';
import type { Scope } from './scope.js';
import { storage } from './storage.js';
import { type TimeoutOptions, timeoutIn } from './timeout-for.js';
import { formatTraceparent } from './trace.js';
import { formatBudgetHeaders } from './wire/format-budget.js';
import type { DeadlineDialect } from './wire/header-names.js';

/**
 * Options of {@link prepareCall}.
 *
 * @example
 * ```ts
 * const { headers } = prepareCall('inventory', { marginMs: 20, dialects: ['grpc'] });
 * ```
 */
export interface PrepareCallOptions extends TimeoutOptions {
  /** Dialects to write besides `X-Request-Deadline` (e.g. `['grpc']` for a gRPC-aware proxy). */
  dialects?: readonly DeadlineDialect[] | undefined;
}

/**
 * What {@link prepareCall} hands the transport.
 *
 * @example
 * ```ts
 * const { timeoutMs, headers }: PreparedCall = prepareCall('inventory');
 * ```
 */
export interface PreparedCall {
  /** The timeout for this call in whole ms (`undefined`: unbounded, no deadline and no `maxMs`). */
  timeoutMs: number | undefined;
  /**
   * Headers to set (replacing any of the same name): the budget, when there is a deadline, and
   * `traceparent` / `tracestate`, when the context has a trace and OpenTelemetry does not propagate it (its
   * instrumentations write their own). Empty outside a context.
   */
  headers: Record<string, string>;
}

/**
 * Prepares one outgoing call: `timeoutFor(target, options)` — so it throws `DeadlineExceededError`
 * (`before-call`) or `CancelledError` when the call must not be made — plus the headers to send. The budget
 * written on the wire is the call's timeout (remaining − margin), so the next hop never plans on time this hop
 * needs for itself. Publishes the `deadline:propagate` diagnostics event when a budget is written.
 *
 * @example
 * ```ts
 * import { prepareCall } from '@deadline/core';
 * const { timeoutMs, headers } = prepareCall('GET http://inventory', { marginMs: 20 });
 * const req = http.request(url, { headers: { ...userHeaders, ...headers }, timeout: timeoutMs });
 * ```
 */
export function prepareCall(target: string, options?: PrepareCallOptions): PreparedCall {
  return prepareCallIn(storage.getStore(), target, options);
}

/**
 * {@link prepareCall} in `scope`, the current context its caller already read (see `timeoutIn`). `budgetHeaders`
 * false: the transport writes the budget in a header of its own (an RPC's `grpc-timeout`), only the trace is added.
 * @internal
 */
export function prepareCallIn(
  scope: Scope | undefined,
  target: string,
  options?: PrepareCallOptions,
  budgetHeaders = true,
): PreparedCall {
  const timeoutMs = timeoutIn(scope, target, options);
  if (scope === undefined) return { timeoutMs, headers: {} };
  const propagates = !scope.deadline.isNone;
  const headers = addTraceHeaders(
    scope,
    propagates && budgetHeaders ? formatBudgetHeaders(timeoutMs as number, options?.dialects) : {},
  );
  if (propagates) publishPropagate({ context: scope, target, timeoutMs: timeoutMs as number, headers });
  return { timeoutMs, headers };
}

/**
 * Adds `scope`'s trace to `headers` (`traceparent`, `tracestate`) and returns them — unless OpenTelemetry propagates
 * the trace itself (its instrumentation writes the same headers). What a message that outlives its request carries.
 * @internal
 */
export function addTraceHeaders(scope: Scope | undefined, headers: Record<string, string>): Record<string, string> {
  const trace = scope?.trace;
  if (trace !== undefined && !openTelemetryPropagates()) {
    headers.traceparent = formatTraceparent(trace);
    if (trace.tracestate !== undefined) headers.tracestate = trace.tracestate;
  }
  return headers;
}
