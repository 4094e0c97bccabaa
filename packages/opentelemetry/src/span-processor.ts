/**
 * The span processor that hands each outgoing call its span. The instrumentations (undici, pg, mysql2, ioredis)
 * start their span inside the driver call, which the adapters of this project run with the call in
 * OpenTelemetry's context: the first span started there is the call's. Nothing else is touched: a span started
 * outside a call is passed over in one context lookup.
 */

import { OUTGOING_CALL_KEY, type OutgoingCall, registerCallSpans } from '@deadline/core/internal';
import type { Context, Span } from '@opentelemetry/api';

/**
 * A span processor for the tracer provider: each outgoing call made under a deadline through `@deadline/http`,
 * `@deadline/pg`, `@deadline/mysql` or `@deadline/redis` writes on the span its instrumentation makes for it the
 * time left before the call (`deadline.remaining_ms`) and the timeout it was given (`deadline.timeout_ms`);
 * when the call is cut off, an event at that moment (`deadline.exceeded` or `deadline.cancelled`, and
 * `deadline.cancel_requested`) and `deadline.cancel: requested`; when the server confirms the work stopped
 * (PostgreSQL's 57014, a KILL QUERY's OK or the killed statement's 1317 or server limit, a CLIENT UNBLOCK's 1),
 * `deadline.cancel_confirmed` and `deadline.cancel: confirmed`. It exports nothing itself: list it beside your
 * exporting processor.
 *
 * @example
 * ```ts
 * import { DeadlineSpanProcessor } from '@deadline/opentelemetry';
 * import { BatchSpanProcessor, NodeTracerProvider } from '@opentelemetry/sdk-trace-node';
 * import { OTLPTraceExporter } from '@opentelemetry/exporter-trace-otlp-http';
 *
 * new NodeTracerProvider({
 *   spanProcessors: [new DeadlineSpanProcessor(), new BatchSpanProcessor(new OTLPTraceExporter())],
 * }).register();
 * ```
 */
export class DeadlineSpanProcessor {
  readonly #unregister = registerCallSpans();

  /** Hands the span to the call whose driver call started it, if any. */
  onStart(span: Span, parentContext: Context): void {
    const call = parentContext.getValue(OUTGOING_CALL_KEY) as OutgoingCall | undefined;
    call?._adoptSpan(span);
  }

  /** Nothing to do when a span ends: what the call learns later goes on the span only while it records. */
  onEnd(): void {}

  /** Nothing is buffered here. */
  forceFlush(): Promise<void> {
    return Promise.resolve();
  }

  /** Stops handing spans to calls (the adapters then no longer put calls in OpenTelemetry's context). */
  shutdown(): Promise<void> {
    this.#unregister();
    return Promise.resolve();
  }
}
