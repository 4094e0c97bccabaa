/**
 * `@deadline/opentelemetry` — the deadline in OpenTelemetry: each outgoing call's deadline on the span its
 * instrumentation makes (a span processor for the tracer provider), and the library's metrics (budgets at arrival
 * and at each call, deadlines exceeded, cancels, admission refusals) recorded on a meter.
 * @packageDocumentation
 */

export { type DeadlineMetricsOptions, recordDeadlineMetrics } from './metrics.js';
export { DeadlineSpanProcessor } from './span-processor.js';
