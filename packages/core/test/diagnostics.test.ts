import diagnostics from 'node:diagnostics_channel';
import { afterEach, describe, expect, it } from 'vitest';
import {
  CancelledError,
  type CancelledMessage,
  type ContextEndMessage,
  type ContextStartMessage,
  createContext,
  currentSignal,
  DeadlineExceededError,
  DiagnosticsChannel,
  type ExceededMessage,
  runWithDeadline,
} from '../src/index.ts';
import { publishCallEnd, publishCallStart, publishPropagate } from '../src/internal.ts';
import { aborted } from './helpers.ts';

const subscriptions: [string, (message: unknown) => void][] = [];
function record<T>(name: string): T[] {
  const messages: T[] = [];
  const listener = (message: unknown) => messages.push(message as T);
  diagnostics.subscribe(name, listener);
  subscriptions.push([name, listener]);
  return messages;
}
afterEach(() => {
  for (const [name, listener] of subscriptions.splice(0)) diagnostics.unsubscribe(name, listener);
});

describe('diagnostics channels', () => {
  it('publish start, exceeded and end for a context that runs out', async () => {
    const starts = record<ContextStartMessage>(DiagnosticsChannel.ContextStart);
    const exceeded = record<ExceededMessage>(DiagnosticsChannel.Exceeded);
    const ends = record<ContextEndMessage>(DiagnosticsChannel.ContextEnd);
    let ctx: unknown;
    await runWithDeadline(30, async (c) => {
      ctx = c;
      await aborted(currentSignal() as AbortSignal);
    });
    expect(starts.map((m) => m.context)).toEqual([ctx]);
    expect(exceeded).toHaveLength(1);
    expect(exceeded[0]?.context).toBe(ctx);
    expect(exceeded[0]?.error).toBeInstanceOf(DeadlineExceededError);
    expect(ends).toHaveLength(1);
    expect(ends[0]?.reason).toBe(exceeded[0]?.error);
  });

  it('publish cancelled with the typed reason, and end once', () => {
    const cancelled = record<CancelledMessage>(DiagnosticsChannel.Cancelled);
    const ends = record<ContextEndMessage>(DiagnosticsChannel.ContextEnd);
    const ctx = createContext({ deadline: 1_000 });
    ctx.cancel(new CancelledError('gone', { reason: 'client-disconnected' }));
    ctx.end();
    ctx.end();
    expect(cancelled.map((m) => m.error.reason)).toEqual(['client-disconnected']);
    expect(ends).toHaveLength(1);
  });

  it('do not call a normal end a cancellation, even with a signal handed out', async () => {
    const cancelled = record<CancelledMessage>(DiagnosticsChannel.Cancelled);
    const ends = record<ContextEndMessage>(DiagnosticsChannel.ContextEnd);
    await runWithDeadline(1_000, async () => {
      currentSignal()?.addEventListener('abort', () => {});
    });
    expect(cancelled).toEqual([]);
    expect(ends).toHaveLength(1);
    expect(ends[0]?.reason).toBeUndefined();
  });

  it('publish start before a cancellation that comes with an already-aborted signal', () => {
    const order: string[] = [];
    const a = () => order.push('start');
    const b = () => order.push('cancelled');
    diagnostics.subscribe(DiagnosticsChannel.ContextStart, a);
    diagnostics.subscribe(DiagnosticsChannel.Cancelled, b);
    subscriptions.push([DiagnosticsChannel.ContextStart, a], [DiagnosticsChannel.Cancelled, b]);
    createContext({ signal: AbortSignal.abort('gone') }).end();
    expect(order).toEqual(['start', 'cancelled']);
  });

  it('reports an expiry nobody noticed when the context ends', async () => {
    const ends = record<ContextEndMessage>(DiagnosticsChannel.ContextEnd);
    await runWithDeadline(5, () => new Promise((resolve) => setTimeout(resolve, 30)));
    expect(ends[0]?.reason).toBeInstanceOf(DeadlineExceededError);
  });

  it('carry the adapters’ call and propagate events', () => {
    const starts = record(DiagnosticsChannel.CallStart);
    const endsOfCalls = record(DiagnosticsChannel.CallEnd);
    const propagated = record(DiagnosticsChannel.Propagate);
    const start = { context: undefined, target: 'db', remainingMs: 100, timeoutMs: 90 };
    publishCallStart(start);
    publishCallEnd({ ...start, elapsedMs: 12, outcome: 'ok' });
    publishPropagate({
      context: undefined,
      target: 'inventory',
      timeoutMs: 90,
      headers: { 'x-request-deadline': '90' },
    });
    expect(starts).toEqual([start]);
    expect(endsOfCalls).toEqual([{ ...start, elapsedMs: 12, outcome: 'ok' }]);
    expect(propagated).toHaveLength(1);
  });
});
