/**
 * The core with `@opentelemetry/api` installed: which trace a context gets, and who writes `traceparent`.
 * The real API, the real W3C propagator and the real AsyncLocalStorage context manager, registered globally as
 * an SDK would; the three-hop chain with the SDK and its instrumentations is in test/opentelemetry.
 */
import { context, propagation, ROOT_CONTEXT, trace } from '@opentelemetry/api';
import { AsyncLocalStorageContextManager } from '@opentelemetry/context-async-hooks';
import { W3CTraceContextPropagator } from '@opentelemetry/core';
import { afterEach, describe, expect, it } from 'vitest';
import {
  createContext,
  currentContext,
  prepareCall,
  runWithContext,
  runWithDeadline,
  traceFrom,
} from '../src/index.ts';
import { openTelemetryPropagates, spanOfTrace } from '../src/internal.ts';
import { setOpenTelemetryForTests } from '../src/opentelemetry/api.ts';

const CALLER = '00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01';
const SPAN = { traceId: '0af7651916cd43dd8448eb211c80319c', spanId: 'b7ad6b7169203331', traceFlags: 1 };

afterEach(() => {
  propagation.disable();
  context.disable();
  setOpenTelemetryForTests(undefined);
});

function withSpan<R>(fn: () => R): R {
  context.setGlobalContextManager(new AsyncLocalStorageContextManager().enable());
  return context.with(trace.setSpan(ROOT_CONTEXT, trace.wrapSpanContext(SPAN)), fn);
}

describe('@opentelemetry/api installed', () => {
  it('nothing registered (the API alone): this library writes its own traceparent, as without the API', () => {
    expect(openTelemetryPropagates()).toBe(false);
    runWithContext({ deadline: 1_000, trace: traceFrom(CALLER, 'v=1') }, (ctx) => {
      const { headers } = prepareCall('inventory');
      expect(headers.traceparent).toBe(`00-4bf92f3577b34da6a3ce929d0e0e4736-${ctx.trace?.spanId}-01`);
      expect(headers.tracestate).toBe('v=1');
    });
  });

  it('a W3C propagator registered: no traceparent or tracestate from this library; the budget still goes', () => {
    propagation.setGlobalPropagator(new W3CTraceContextPropagator());
    expect(openTelemetryPropagates()).toBe(true);
    runWithContext({ deadline: 1_000, trace: traceFrom(CALLER, 'v=1') }, () => {
      const { headers, timeoutMs } = prepareCall('inventory', { marginMs: 20 });
      expect(headers).toEqual({ 'x-request-deadline': String(timeoutMs) });
    });
    // Taken away again: back to this library's own.
    propagation.disable();
    runWithContext({ deadline: 1_000, trace: traceFrom(CALLER) }, () => {
      expect(prepareCall('inventory').headers.traceparent).toMatch(/^00-4bf92f3577b34da6a3ce929d0e0e4736-/);
    });
  });

  it('a propagator that does not handle traceparent (B3 only, say) leaves ours in place', () => {
    propagation.setGlobalPropagator({
      inject: () => {},
      extract: (ctx) => ctx,
      fields: () => ['b3'],
    });
    runWithContext({ deadline: 1_000, trace: traceFrom(CALLER) }, () => {
      expect(prepareCall('inventory').headers.traceparent).toBeDefined();
    });
  });

  it('a valid active span (no propagator): no traceparent from this library', () => {
    withSpan(() => {
      expect(openTelemetryPropagates()).toBe(true);
      runWithContext({ deadline: 1_000, trace: traceFrom(CALLER) }, () => {
        expect(prepareCall('inventory').headers.traceparent).toBeUndefined();
      });
    });
  });

  it('a root context started inside a span takes the span’s trace; a child keeps its parent’s', () => {
    withSpan(() => {
      runWithDeadline(1_000, (ctx) => {
        expect(ctx.trace).toMatchObject({ traceId: SPAN.traceId, spanId: SPAN.spanId, flags: 1 });
        expect(spanOfTrace(ctx.trace)?.spanContext()).toMatchObject(SPAN);
        const own = traceFrom(CALLER);
        runWithContext({ trace: own }, () => {
          const child = createContext({ deadline: 500 });
          expect(child.trace).toBe(own);
          child.end();
          expect(currentContext()?.trace).toBe(own);
        });
      });
    });
  });

  it('an API that cannot be loaded counts as absent: the trace and the headers are this library’s', () => {
    setOpenTelemetryForTests(null);
    withSpan(() => {
      expect(openTelemetryPropagates()).toBe(false);
      runWithDeadline(1_000, (ctx) => {
        expect(ctx.trace).toBeUndefined();
        expect(prepareCall('inventory').headers.traceparent).toBeUndefined();
      });
      runWithContext({ deadline: 1_000, trace: traceFrom(CALLER) }, () => {
        expect(prepareCall('inventory').headers.traceparent).toMatch(/^00-4bf92f3577b34da6a3ce929d0e0e4736-/);
      });
    });
  });
});
