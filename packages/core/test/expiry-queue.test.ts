import { AsyncLocalStorage } from 'node:async_hooks';
import fc from 'fast-check';
import { afterEach, describe, expect, it, vi } from 'vitest';
import { createContext, currentContext, DeadlineExceededError, type OwnedContext } from '../src/index.ts';
import { monotonicNow, type Scope, waitingForExpiry } from '../src/internal.ts';

describe('the expiry queue (one timer for every context)', () => {
  afterEach(() => {
    vi.useRealTimers();
  });

  it('each context expires at its deadline, never before, inside itself; one left in time never fires', async () => {
    // Another library's store, set where the listeners subscribe (and so where the queue's timer gets armed).
    const other = new AsyncLocalStorage<string>();
    const fired = new Map<number, { at: number; inside: boolean; otherStore: string | undefined; reason: unknown }>();
    const contexts: { ctx: OwnedContext; off: () => void; removed: boolean }[] = [];
    let expected = 0;
    let allFired: () => void = () => {};
    const done = new Promise<void>((resolve) => {
      allFired = resolve;
    });
    other.run('the request that armed the timer', () => {
      for (let i = 0; i < 300; i++) {
        // Deadlines out of order, some equal: 50 to 129 ms, and 250 to 329 ms for the third left before theirs. Not
        // from 1 ms: a pause of the process (a collection, a shared CPU) between a context's start and its `onStop`
        // had a 1 ms deadline pass there, and its listener ran at once, outside it.
        const ctx = createContext({ root: true, deadline: (i % 3 === 0 ? 250 : 50) + ((i * 37) % 80) });
        const off = ctx.onStop((reason) => {
          fired.set(i, {
            at: monotonicNow(),
            inside: currentContext() === ctx,
            otherStore: other.getStore(),
            reason,
          });
          if (fired.size === expected) allFired();
        });
        contexts.push({ ctx, off, removed: false });
      }
    });
    // A third leave before their deadline: nobody listens to them any more.
    for (let i = 0; i < contexts.length; i += 3) {
      const entry = contexts[i] as (typeof contexts)[number];
      entry.off();
      entry.removed = true;
    }
    expected = contexts.filter((entry) => !entry.removed).length;
    // Past every deadline of those left, in the queue's order: had one of them stayed, it would have fired first.
    const last = createContext({ root: true, deadline: 400 });
    const lastStopped = new Promise((resolve) => last.onStop(resolve));
    await done;
    await lastStopped;
    for (const [i, entry] of contexts.entries()) {
      const seen = fired.get(i);
      if (entry.removed) {
        expect(seen).toBeUndefined();
        continue;
      }
      expect(seen?.reason).toBeInstanceOf(DeadlineExceededError);
      expect(seen?.at).toBeGreaterThanOrEqual(entry.ctx.deadline.expiresAt);
      expect(seen?.inside).toBe(true);
      expect(seen?.otherStore).toBeUndefined();
    }
    for (const { ctx } of contexts) ctx.end();
    expect(waitingForExpiry()).toBe(0);
  });

  it('a listener that starts a context with an earlier deadline gets it served (the queue re-arms inside a firing)', async () => {
    const first = createContext({ root: true, deadline: 5 });
    const second = await new Promise<number>((resolve) => {
      first.onStop(() => {
        const started = monotonicNow();
        const inner = createContext({ root: true, deadline: 2 });
        inner.onStop(() => resolve(monotonicNow() - started));
      });
    });
    expect(second).toBeGreaterThanOrEqual(2);
    expect(second).toBeLessThan(2_000);
    expect(waitingForExpiry()).toBe(0);
  });

  it('follows the timer functions in use: armed under real timers, still served under fake ones and back', () => {
    const real = createContext({ root: true, deadline: 60_000 });
    const realStops: unknown[] = [];
    const offReal = real.onStop((reason) => realStops.push(reason));
    vi.useFakeTimers({ toFake: ['performance', 'setTimeout', 'clearTimeout'] });
    const fake = createContext({ root: true, deadline: 100 });
    const fakeStops: unknown[] = [];
    fake.onStop((reason) => fakeStops.push(reason));
    vi.advanceTimersByTime(99);
    expect(fakeStops).toEqual([]);
    vi.advanceTimersByTime(1);
    expect(fakeStops).toHaveLength(1);
    vi.useRealTimers();
    offReal();
    real.end();
    expect(realStops).toEqual([]);
    expect(waitingForExpiry()).toBe(0);
  });

  it('property: whatever the order of joining, leaving and time passing, exactly the due contexts expired', () => {
    const operation = fc.oneof(
      fc.record({ kind: fc.constant('join' as const), ms: fc.integer({ min: 0, max: 500 }) }),
      fc.record({ kind: fc.constant('leave' as const), pick: fc.nat() }),
      fc.record({ kind: fc.constant('advance' as const), ms: fc.integer({ min: 0, max: 200 }) }),
    );
    fc.assert(
      fc.property(fc.array(operation, { maxLength: 80 }), (operations) => {
        vi.useFakeTimers({ toFake: ['performance', 'setTimeout', 'clearTimeout'] });
        try {
          const live: { ctx: Scope; off: () => void; stopped: boolean }[] = [];
          const all: typeof live = [];
          for (const op of operations) {
            if (op.kind === 'join') {
              const ctx = createContext({ root: true, deadline: op.ms }) as Scope;
              const entry = { ctx, off: () => {}, stopped: false };
              entry.off = ctx.onStop(() => {
                entry.stopped = true;
              });
              if (!entry.stopped) live.push(entry);
              all.push(entry);
            } else if (op.kind === 'leave' && live.length > 0) {
              const [entry] = live.splice(op.pick % live.length, 1);
              entry?.off();
            } else if (op.kind === 'advance') {
              vi.advanceTimersByTime(op.ms);
            }
            const now = monotonicNow();
            for (let i = live.length - 1; i >= 0; i--) {
              const entry = live[i] as (typeof live)[number];
              // Due ones have stopped (the fake clock fires timers exactly), the others wait.
              expect(entry.stopped).toBe(entry.ctx.deadline.expiresAt <= now);
              if (entry.stopped) live.splice(i, 1);
            }
            expect(waitingForExpiry()).toBe(live.length);
          }
          for (const entry of all) {
            entry.off();
            entry.ctx.end();
          }
          expect(waitingForExpiry()).toBe(0);
        } finally {
          vi.useRealTimers();
        }
      }),
      { numRuns: 200 },
    );
  });
});
