/**
 * A service's OpenTelemetry set-up, for the overhead rows "with OpenTelemetry": a tracer provider with a batch
 * span processor (its exporter drops the spans: the cost measured is making them, not shipping them), the W3C
 * propagator and the AsyncLocalStorage context manager (`register()`), and the http instrumentation. Called
 * in the server's own process before the server is made.
 */
import { createRequire } from 'node:module';
import { registerInstrumentations } from '@opentelemetry/instrumentation';
import { HttpInstrumentation } from '@opentelemetry/instrumentation-http';
import { BatchSpanProcessor, NodeTracerProvider } from '@opentelemetry/sdk-trace-node';

const dropSpans = {
  export: (_spans: unknown[], done: (result: { code: number }) => void) => done({ code: 0 }),
  shutdown: () => Promise.resolve(),
};

export function registerOpenTelemetry(): void {
  new NodeTracerProvider({ spanProcessors: [new BatchSpanProcessor(dropSpans)] }).register();
  registerInstrumentations({ instrumentations: [new HttpInstrumentation()] });
  // The instrumentation patches `http` when it is next required; the frameworks required it at import.
  createRequire(import.meta.url)('node:http');
}
