import diagnostics from 'node:diagnostics_channel';
import { afterEach, beforeEach, describe, expect, it, vi } from 'vitest';
import {
  CancelledError,
  createContext,
  DeadlineExceededError,
  DiagnosticsChannel,
  type ExceededMessage,
  InvalidArgumentError,
  runWithDeadline,
  timeoutFor,
  withoutCancel,
} from '../src/index.ts';

describe('timeoutFor', () => {
  beforeEach(() => {
    vi.useFakeTimers({ toFake: ['performance', 'setTimeout', 'clearTimeout'] });
  });
  afterEach(() => {
    vi.useRealTimers();
  });

  it('gives remaining − margin, in whole ms, capped by maxMs', () => {
    runWithDeadline(1_000, () => {
      expect(timeoutFor('db')).toBe(1_000);
      expect(timeoutFor('db', { marginMs: 50 })).toBe(950);
      expect(timeoutFor('db', { marginMs: 50, maxMs: 300 })).toBe(300);
      vi.advanceTimersByTime(400.4);
      expect(timeoutFor('db', { marginMs: 50 })).toBe(549);
    });
  });

  it('returns maxMs (or undefined) without a deadline: behaviour unchanged outside a context', () => {
    expect(timeoutFor('db')).toBeUndefined();
    expect(timeoutFor('db', { maxMs: 2_000 })).toBe(2_000);
    expect(timeoutFor('db', { maxMs: 2_000.9 })).toBe(2_000);
    withoutCancel(() => expect(timeoutFor('db', { maxMs: 700 })).toBe(700));
    runWithDeadline(Number.POSITIVE_INFINITY, () => expect(timeoutFor('db')).toBeUndefined());
  });

  it('short-circuits below minMs: DeadlineExceededError before-call, naming the target', () => {
    const exceeded: ExceededMessage[] = [];
    const onExceeded = (m: unknown) => exceeded.push(m as ExceededMessage);
    diagnostics.subscribe(DiagnosticsChannel.Exceeded, onExceeded);
    try {
      runWithDeadline(100, () => {
        vi.advanceTimersByTime(70);
        expect(timeoutFor('inventory', { marginMs: 10, minMs: 20 })).toBe(20);
        vi.advanceTimersByTime(1);
        let error: unknown;
        try {
          timeoutFor('inventory', { marginMs: 10, minMs: 20 });
        } catch (err) {
          error = err;
        }
        expect(error).toBeInstanceOf(DeadlineExceededError);
        expect(error).toMatchObject({
          phase: 'before-call',
          target: 'inventory',
          whose: 'local',
          budgetMs: 100,
          elapsedMs: 71,
        });
        expect((error as Error).message).toBe('not calling inventory: 29 ms left, the call needs at least 30 ms');
        expect(exceeded.at(-1)?.error).toBe(error);
      });
    } finally {
      diagnostics.unsubscribe(DiagnosticsChannel.Exceeded, onExceeded);
    }
  });

  it('never returns 0 or less, whatever the options', () => {
    runWithDeadline(10, () => {
      vi.advanceTimersByTime(9.5);
      expect(() => timeoutFor('x', { minMs: 0 })).toThrow('not calling x: 0 ms left, the call needs at least 1 ms');
      vi.advanceTimersByTime(1);
      expect(() => timeoutFor('x', { minMs: 0 })).toThrow(DeadlineExceededError);
    });
  });

  it('refuses to call from a cancelled or ended context with CancelledError', () => {
    const ctx = createContext({ deadline: 5_000 });
    ctx.run(() => {
      ctx.cancel(new CancelledError('client gone', { reason: 'client-disconnected' }));
      expect(() => timeoutFor('db')).toThrow(CancelledError);
      try {
        timeoutFor('db');
      } catch (err) {
        // The why is said once: in the message, not again as a cause (a logger prints a cause after the message).
        expect(err).toMatchObject({ reason: 'client-disconnected', message: 'not calling db: client gone' });
        expect((err as Error).cause).toBeUndefined();
      }
    });
    ctx.end();
  });

  it('validates its options, naming them', () => {
    expect(() => timeoutFor('db', { marginMs: -1 })).toThrow(InvalidArgumentError);
    expect(() => timeoutFor('db', { minMs: Number.NaN })).toThrow(/minMs must be a number ≥ 0/);
    expect(() => timeoutFor('db', { maxMs: 0 })).toThrow(/maxMs must be a number ≥ 1; received 0/);
    expect(() => timeoutFor('db', { minMs: 50, maxMs: 20 })).toThrow(/maxMs must be a number ≥ 50; received 20/);
  });

  it('clamps to what a timer can hold', () => {
    runWithDeadline(40 * 24 * 3_600_000, () => {
      expect(timeoutFor('db')).toBe(2_147_483_647);
    });
  });
});
