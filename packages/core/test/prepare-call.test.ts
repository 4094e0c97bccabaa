import diagnostics from 'node:diagnostics_channel';
import { afterEach, beforeEach, describe, expect, it, vi } from 'vitest';
import {
  createContext,
  DeadlineExceededError,
  DiagnosticsChannel,
  type PropagateMessage,
  prepareCall,
  runWithContext,
  runWithDeadline,
  traceFrom,
  withoutCancel,
} from '../src/index.ts';

describe('prepareCall', () => {
  beforeEach(() => {
    vi.useFakeTimers({ toFake: ['performance', 'setTimeout', 'clearTimeout'] });
  });
  afterEach(() => {
    vi.useRealTimers();
  });

  it('outside a context: no headers, the configured timeout, behaviour unchanged', () => {
    expect(prepareCall('inventory')).toEqual({ timeoutMs: undefined, headers: {} });
    expect(prepareCall('inventory', { maxMs: 3_000 })).toEqual({ timeoutMs: 3_000, headers: {} });
  });

  it('writes remaining − margin and the trace, recomputed at every call (decreasing budgets)', () => {
    const trace = traceFrom('00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01', 'v=1');
    runWithContext({ deadline: 1_000, trace }, () => {
      const first = prepareCall('inventory', { marginMs: 20, dialects: ['grpc'] });
      expect(first).toEqual({
        timeoutMs: 980,
        headers: {
          'x-request-deadline': '980',
          'grpc-timeout': '980000u',
          traceparent: `00-4bf92f3577b34da6a3ce929d0e0e4736-${trace.spanId}-01`,
          tracestate: 'v=1',
        },
      });
      vi.advanceTimersByTime(300);
      const retry = prepareCall('inventory', { marginMs: 20 });
      expect(retry.headers['x-request-deadline']).toBe('680');
    });
  });

  it('forwards the trace but no budget when the context has no deadline', () => {
    const trace = traceFrom();
    runWithContext({ trace }, () => {
      expect(prepareCall('audit').headers).toEqual({ traceparent: `00-${trace.traceId}-${trace.spanId}-01` });
    });
    runWithContext({ trace, deadline: 500 }, () =>
      withoutCancel(() => {
        expect(Object.keys(prepareCall('audit').headers)).toEqual(['traceparent']);
      }),
    );
  });

  it('short-circuits exactly like timeoutFor, and publishes nothing then', () => {
    const propagated: PropagateMessage[] = [];
    const listener = (m: unknown) => propagated.push(m as PropagateMessage);
    diagnostics.subscribe(DiagnosticsChannel.Propagate, listener);
    try {
      runWithDeadline(100, () => {
        prepareCall('inventory', { marginMs: 10 });
        vi.advanceTimersByTime(95);
        expect(() => prepareCall('inventory', { marginMs: 10 })).toThrow(DeadlineExceededError);
      });
      expect(propagated).toHaveLength(1);
      expect(propagated[0]).toMatchObject({ target: 'inventory', timeoutMs: 90 });
    } finally {
      diagnostics.unsubscribe(DiagnosticsChannel.Propagate, listener);
    }
    const ctx = createContext({ deadline: 100 });
    ctx.cancel();
    expect(() => ctx.run(() => prepareCall('x'))).toThrow(/not calling x/);
    ctx.end();
  });
});
