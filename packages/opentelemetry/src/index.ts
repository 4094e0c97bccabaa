/**
 * `@deadline/opentelemetry` — puts each outgoing call's deadline on the span OpenTelemetry's instrumentations
 * make for it: a span processor to add to the tracer provider.
 * @packageDocumentation
 */

export { DeadlineSpanProcessor } from './span-processor.js';
