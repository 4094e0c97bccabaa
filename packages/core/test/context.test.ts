import { afterEach, describe, expect, it, vi } from 'vitest';
import {
  CancelledError,
  createContext,
  currentContext,
  currentDeadline,
  currentSignal,
  Deadline,
  DeadlineExceededError,
  InvalidArgumentError,
  type OwnedContext,
  remainingMs,
  runWithContext,
  runWithDeadline,
  throwIfExpired,
  traceFrom,
  withoutCancel,
} from '../src/index.ts';
import { type Scope, waitingForExpiry } from '../src/internal.ts';
import { aborted } from './helpers.ts';

afterEach(() => {
  vi.useRealTimers();
});

describe('outside any context', () => {
  it('has no deadline, no signal, and nothing to throw', () => {
    expect(currentContext()).toBeUndefined();
    expect(currentDeadline()).toBe(Deadline.NONE);
    expect(remainingMs()).toBe(Number.POSITIVE_INFINITY);
    expect(currentSignal()).toBeUndefined();
    expect(() => throwIfExpired()).not.toThrow();
  });
});

describe('runWithDeadline', () => {
  it('sets the deadline for everything inside and returns what fn returns', async () => {
    const before = performance.now();
    const result = await runWithDeadline(500, async (ctx) => {
      expect(currentContext()).toBe(ctx);
      expect(currentDeadline()).toBe(ctx.deadline);
      // The budget less what has passed since (however long the machine kept this process off the CPU).
      expect(remainingMs()).toBeGreaterThanOrEqual(500 - (performance.now() - before));
      expect(remainingMs()).toBeLessThanOrEqual(500);
      await new Promise((resolve) => setTimeout(resolve, 5));
      expect(currentContext()).toBe(ctx);
      return 'value';
    });
    expect(result).toBe('value');
    expect(currentContext()).toBeUndefined();
  });

  it('accepts a Deadline and runs synchronous functions', () => {
    const d = Deadline.fromNow(300);
    expect(runWithDeadline(d, () => currentDeadline())).toBe(d);
  });

  it('nested: the earlier deadline wins, a later one never extends', () => {
    runWithDeadline(200, (outer) => {
      runWithDeadline(1_000, (inner) => {
        expect(inner.deadline).toBe(outer.deadline);
      });
      runWithDeadline(50, (inner) => {
        expect(inner.deadline.expiresAt).toBeLessThan(outer.deadline.expiresAt);
        expect(remainingMs()).toBeLessThanOrEqual(50);
      });
      expect(currentDeadline()).toBe(outer.deadline);
    });
  });

  it('rejects a budget that is not a number or a Deadline', () => {
    expect(() => runWithDeadline(Number.NaN, () => 1)).toThrow(InvalidArgumentError);
    expect(() => runWithDeadline('5' as unknown as number, () => 1)).toThrow(InvalidArgumentError);
    expect(() => runWithContext({ deadline: {} as Deadline }, () => 1)).toThrow(/deadline must be/);
  });

  it('propagates a synchronous throw and a rejection unchanged', async () => {
    const boom = new Error('boom');
    expect(() =>
      runWithDeadline(100, () => {
        throw boom;
      }),
    ).toThrow(boom);
    await expect(
      runWithDeadline(100, async () => {
        throw boom;
      }),
    ).rejects.toBe(boom);
  });

  it('calls a foreign thenable exactly once, inside the context', async () => {
    let calls = 0;
    let seen: unknown;
    const lazyQuery = {
      // biome-ignore lint/suspicious/noThenProperty: a query builder is exactly this kind of thenable
      then(resolve: (v: string) => void) {
        calls++;
        seen = currentContext();
        resolve('rows');
      },
    };
    let ctx: unknown;
    const rows = await runWithDeadline(200, (c) => {
      ctx = c;
      return lazyQuery;
    });
    expect(rows).toBe('rows');
    expect(calls).toBe(1);
    expect(seen).toBe(ctx);
  });
});

describe('the context signal', () => {
  it('aborts with a typed DeadlineExceededError when the deadline passes', async () => {
    const started = performance.now();
    const reason = await runWithDeadline(80, async () => {
      const signal = currentSignal();
      expect(signal).toBeInstanceOf(AbortSignal);
      expect(currentSignal()).toBe(signal); // one per context
      return aborted(signal as AbortSignal);
    });
    const took = performance.now() - started;
    expect(reason).toBeInstanceOf(DeadlineExceededError);
    expect(reason).toMatchObject({ code: 'ERR_DEADLINE_EXCEEDED', phase: 'in-handler', whose: 'local', budgetMs: 80 });
    expect((reason as DeadlineExceededError).hop).toBeUndefined();
    expect((reason as DeadlineExceededError).elapsedMs).toBeGreaterThanOrEqual(80);
    expect(took).toBeGreaterThanOrEqual(79);
    expect(took).toBeLessThan(2_000);
  });

  it('is created only when asked: nothing waits for the deadline of a context whose signal nobody reads', async () => {
    const before = waitingForExpiry();
    let ctx: Scope | undefined;
    await runWithDeadline(60_000, async (c) => {
      ctx = c as Scope;
      remainingMs();
      throwIfExpired();
      expect(ctx._waiting).toBe(-1);
      expect(waitingForExpiry()).toBe(before);
      currentSignal();
      expect(ctx._waiting).toBeGreaterThanOrEqual(0);
      expect(waitingForExpiry()).toBe(before + 1);
    });
    // Ended: it waits no more.
    expect(ctx?._waiting).toBe(-1);
    expect(waitingForExpiry()).toBe(before);
  });

  it('aborts with CancelledError(context-ended) when the context ends with work in flight', async () => {
    let signal: AbortSignal | undefined;
    const seen: unknown[] = [];
    await runWithDeadline(60_000, async () => {
      signal = currentSignal();
      // A call still running when the handler returns (it listens to the signal, as fetch does).
      signal?.addEventListener('abort', () => seen.push(signal?.reason));
    });
    expect(signal?.aborted).toBe(true);
    expect(seen).toHaveLength(1);
    expect(signal?.reason).toBeInstanceOf(CancelledError);
    expect(signal?.reason.reason).toBe('context-ended');
  });

  it('aborts a handed-out signal at the end even when nothing listens to it', async () => {
    let signal: AbortSignal | undefined;
    await runWithDeadline(60_000, async () => {
      signal = currentSignal();
    });
    // Someone may poll it, or have linked it by AbortSignal.any() (which adds no listener): it must say so.
    expect(signal?.aborted).toBe(true);
    expect(signal?.reason).toMatchObject({ code: 'ERR_CANCELLED', reason: 'context-ended' });
  });

  it('reports an unnoticed expiry at the end as an expiry', async () => {
    let ctx: OwnedContext | undefined;
    await runWithDeadline(5, async (c) => {
      ctx = c;
      await new Promise((resolve) => setTimeout(resolve, 30));
    });
    expect(ctx?.stopReason).toBeInstanceOf(DeadlineExceededError);
  });

  it('is already aborted when asked for after the deadline passed', () => {
    vi.useFakeTimers({ toFake: ['performance', 'setTimeout', 'clearTimeout'] });
    runWithDeadline(100, () => {
      vi.advanceTimersByTime(150);
      const signal = currentSignal();
      expect(signal?.aborted).toBe(true);
      expect(signal?.reason).toBeInstanceOf(DeadlineExceededError);
    });
  });

  it('clamps timers beyond 2^31−1 ms instead of firing at once', () => {
    vi.useFakeTimers({ toFake: ['performance', 'setTimeout', 'clearTimeout'] });
    const thirtyDays = 30 * 24 * 3_600_000;
    runWithDeadline(thirtyDays, () => {
      const signal = currentSignal() as AbortSignal;
      vi.advanceTimersByTime(1);
      expect(signal.aborted).toBe(false);
      vi.advanceTimersByTime(2_147_483_647);
      expect(signal.aborted).toBe(false); // re-armed for the rest
      vi.advanceTimersByTime(thirtyDays - 2_147_483_647);
      expect(signal.aborted).toBe(true);
      expect(signal.reason).toBeInstanceOf(DeadlineExceededError);
    });
  });
});

describe('cancellation', () => {
  it('cancel(reason) aborts the signal and every derived context, not the parent', async () => {
    const outer = createContext({ deadline: 60_000 });
    await outer.run(async () => {
      const outerSignal = currentSignal() as AbortSignal;
      await runWithDeadline(30_000, async (inner) => {
        const innerSignal = currentSignal() as AbortSignal;
        await runWithDeadline(10_000, async () => {
          const innermost = currentSignal() as AbortSignal;
          inner.cancel('stop the inner work');
          expect(innerSignal.reason).toBeInstanceOf(CancelledError);
          expect(innermost.aborted).toBe(true);
          expect(innermost.reason).toBe(innerSignal.reason);
          expect(outerSignal.aborted).toBe(false);
          expect(() => throwIfExpired()).toThrow(CancelledError);
        });
      });
      outer.cancel(new CancelledError('client gone', { reason: 'client-disconnected' }));
      expect(outerSignal.reason).toMatchObject({ reason: 'client-disconnected' });
    });
    outer.end();
  });

  it('reaches a child that never asked for a signal, lazily', () => {
    const outer = createContext({ deadline: 60_000 });
    outer.run(() => {
      runWithDeadline(30_000, (inner) => {
        outer.cancel();
        expect(inner.stopReason).toBeInstanceOf(CancelledError);
        expect(currentSignal()?.aborted).toBe(true);
      });
    });
    outer.end();
  });

  it('maps non-typed reasons to CancelledError with the cause kept', () => {
    const ctx = createContext({ deadline: 1_000 });
    const signal = ctx.signal as AbortSignal;
    const cause = new TypeError('socket hang up');
    ctx.cancel(cause);
    expect(signal.reason).toBeInstanceOf(CancelledError);
    expect(signal.reason.cause).toBe(cause);
    ctx.cancel('again'); // idempotent: the first reason stays
    expect(ctx.stopReason).toBe(signal.reason);
    ctx.end();
  });

  it('follows an external signal (the host request signal)', async () => {
    const host = new AbortController();
    const ctx = createContext({ deadline: 60_000, signal: host.signal });
    const signal = ctx.signal as AbortSignal;
    host.abort(new CancelledError('client closed', { reason: 'client-disconnected' }));
    expect(await aborted(signal)).toMatchObject({ code: 'ERR_CANCELLED', reason: 'client-disconnected' });
    const early = createContext({ signal: AbortSignal.abort('gone') });
    expect(early.stopReason).toBeInstanceOf(CancelledError);
    expect(() => createContext({ signal: {} as AbortSignal })).toThrow(InvalidArgumentError);
  });

  it('throwIfExpired() stops a CPU-bound loop at the deadline', () => {
    let iterations = 0;
    const started = performance.now();
    const error = runWithContext({ deadline: 50, hop: 'scorer' }, () => {
      try {
        for (;;) {
          throwIfExpired();
          iterations++;
        }
      } catch (err) {
        return err;
      }
    });
    expect(error).toBeInstanceOf(DeadlineExceededError);
    expect((error as DeadlineExceededError).phase).toBe('in-handler');
    expect((error as DeadlineExceededError).hop).toBe('scorer');
    expect(iterations).toBeGreaterThan(0);
    expect(performance.now() - started).toBeLessThan(2_000);
  });
});

describe('onStop listeners', () => {
  it('are called once with the reason; unsubscribing works; a throwing one does not stop the rest', () => {
    const warnings: Error[] = [];
    const onWarning = (w: Error) => warnings.push(w);
    process.on('warning', onWarning);
    const ctx = createContext({ deadline: 60_000 });
    const calls: unknown[] = [];
    ctx.onStop(() => {
      throw new Error('listener bug');
    });
    ctx.onStop((r) => calls.push(r));
    const off = ctx.onStop(() => calls.push('unsubscribed'));
    off();
    ctx.cancel('done');
    ctx.cancel('twice');
    expect(calls).toHaveLength(1);
    expect(calls[0]).toBeInstanceOf(CancelledError);
    // Subscribing after the stop calls at once.
    ctx.onStop((r) => calls.push(r));
    expect(calls).toHaveLength(2);
    ctx.end();
    return new Promise<void>((resolve) => {
      setImmediate(() => {
        process.off('warning', onWarning);
        expect(warnings.some((w) => w.message === 'a stop listener threw: listener bug')).toBe(true);
        resolve();
      });
    });
  });

  it('unsubscribing the last listener takes the context out of the expiry queue', () => {
    const before = waitingForExpiry();
    const ctx = createContext({ deadline: 60_000 }) as Scope;
    const off = ctx.onStop(() => {});
    expect(waitingForExpiry()).toBe(before + 1);
    off();
    expect(ctx._waiting).toBe(-1);
    expect(waitingForExpiry()).toBe(before);
    ctx.end();
  });
});

describe('metadata', () => {
  it('is inherited and merged by nested contexts', () => {
    const trace = traceFrom('00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01');
    runWithContext({ deadline: 1_000, trace, hop: 'gateway', baggage: { tenant: 'a' }, bindings: { reqId: 1 } }, () => {
      runWithContext({ hop: 'gateway-db', baggage: { shard: '3' }, bindings: { step: 'load' } }, (inner) => {
        expect(inner.trace).toBe(trace);
        expect(inner.hop).toBe('gateway-db');
        expect(inner.baggage).toEqual({ tenant: 'a', shard: '3' });
        expect(inner.bindings).toEqual({ reqId: 1, step: 'load' });
        expect(Object.isFrozen(inner.baggage)).toBe(true);
      });
    });
  });

  it('validates what it is given', () => {
    expect(() => createContext({ hop: '' })).toThrow(/hop must be 1 to 128 visible ASCII characters/);
    expect(() => createContext({ hop: 'a\nb' })).toThrow(InvalidArgumentError);
    expect(() => createContext({ hop: 'zahlungs dienst' })).toThrow(/visible ASCII/);
    expect(() => createContext({ hop: '服务' })).toThrow(InvalidArgumentError);
    expect(createContext({ hop: 'orders-v2.eu' }).hop).toBe('orders-v2.eu');
    expect(() => createContext({ baggage: { n: 1 } as unknown as Record<string, string> })).toThrow(/baggage.n/);
    const tooMany = Object.fromEntries(Array.from({ length: 65 }, (_, i) => [`k${i}`, 'v']));
    expect(() => createContext({ baggage: tooMany })).toThrow(/at most 64/);
    const half = (from: number) => Object.fromEntries(Array.from({ length: 40 }, (_, i) => [`k${from + i}`, 'v']));
    expect(() => runWithContext({ baggage: half(0) }, () => createContext({ baggage: half(40) }))).toThrow(
      /at most 64 entries, with the parent's/,
    );
    expect(() => createContext(null as unknown as object)).toThrow(InvalidArgumentError);
  });

  it('root: true starts a new tree', () => {
    runWithContext({ deadline: 100, hop: 'ambient' }, () => {
      const ctx = createContext({ root: true, deadline: 5_000 });
      expect(ctx.hop).toBeUndefined();
      expect(ctx.deadline.budgetMs).toBe(5_000);
      ctx.end();
    });
  });
});

describe('withoutCancel', () => {
  it('keeps the metadata, drops the deadline and the cancellation', async () => {
    const trace = traceFrom();
    const parent = createContext({ deadline: 100, trace, hop: 'orders', baggage: { tenant: 't1' } });
    let detachedDone: Promise<string> | undefined;
    parent.run(() => {
      detachedDone = withoutCancel(async () => {
        const ctx = currentContext();
        expect(ctx?.trace?.traceId).toBe(trace.traceId);
        expect(ctx?.hop).toBe('orders');
        expect(ctx?.baggage).toEqual({ tenant: 't1' });
        expect(ctx?.detached).toBe(true);
        expect(currentDeadline()).toBe(Deadline.NONE);
        expect(currentSignal()).toBeUndefined();
        // The parent ends (its request is over) while the detached work is still running.
        await new Promise((resolve) => setTimeout(resolve, 20));
        expect(() => throwIfExpired()).not.toThrow();
        // A fresh, independent budget inside.
        return runWithDeadline(5_000, async () => {
          expect(remainingMs()).toBeGreaterThan(4_000);
          expect(currentContext()?.trace).toBe(trace);
          expect(currentContext()?.detached).toBe(true);
          return 'landed';
        });
      });
    });
    parent.cancel('request over');
    parent.end();
    expect(await detachedDone).toBe('landed');
  });

  it('is the difference between work that is cut and work that lands', async () => {
    const results: string[] = [];
    const work = async (label: string) => {
      await new Promise((resolve) => setTimeout(resolve, 30));
      try {
        throwIfExpired();
        results.push(`${label}: landed`);
      } catch (err) {
        results.push(`${label}: ${(err as Error).name}`);
      }
    };
    let inherited: Promise<void> | undefined;
    let detached: Promise<void> | undefined;
    await runWithDeadline(1_000, async () => {
      inherited = work('inherited');
      detached = withoutCancel(() => work('detached'));
    });
    await Promise.all([inherited, detached]);
    expect(results.sort()).toEqual(['detached: landed', 'inherited: CancelledError']);
  });
});
