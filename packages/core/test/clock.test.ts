/**
 * The clock every deadline is measured on: `performance.now()`'s, read from `process.hrtime()` on Node 20, 22 and 24
 * (where `performance.now()` costs more), and from the global `performance` once fake timers swapped the timers.
 */
import { afterEach, describe, expect, it, vi } from 'vitest';
import { monotonicNow } from '../src/clock.ts';

describe('monotonicNow()', () => {
  afterEach(() => {
    vi.useRealTimers();
  });

  it('reads what performance.now() reads, to within a few microseconds, and never goes back', () => {
    let last = monotonicNow();
    for (let i = 0; i < 10_000; i++) {
      const before = performance.now();
      const now = monotonicNow();
      const after = performance.now();
      // Read between the two: no earlier than the first, no later than the second, give or take a few
      // microseconds (on Node 20, 22 and 24, where performance.now()'s zero on process.hrtime()'s clock is estimated).
      expect(now).toBeGreaterThanOrEqual(before - 0.005);
      expect(now).toBeLessThanOrEqual(after + 0.005);
      expect(now).toBeGreaterThanOrEqual(last);
      last = now;
    }
  });

  it('follows fake timers that swap performance with the timers', () => {
    vi.useFakeTimers({ toFake: ['performance', 'setTimeout', 'clearTimeout'] });
    const start = monotonicNow();
    vi.advanceTimersByTime(1_234);
    expect(monotonicNow() - start).toBe(1_234);
  });
});
