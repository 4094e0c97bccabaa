/**
 * A route's service time, as admission will ask for it: the estimate is never below the percentile it estimates and
 * at most one bucket (10 %) above it, follows a route whose cost changes, forgets a burst of outliers, gives nothing
 * before its warm-up, and ignores what is not a duration.
 */
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { ServiceTime } from '../src/internal.ts';

/** The q-quantile by nearest rank: the least sample with at least q of all at or below it. */
function exact(samples: number[], q: number): number {
  const sorted = [...samples].sort((a, b) => a - b);
  return sorted[Math.max(0, Math.ceil(q * sorted.length) - 1)] as number;
}

describe('ServiceTime', () => {
  it('estimates the percentile from above, within one bucket (10 %), whatever the samples', () => {
    fc.assert(
      fc.property(
        fc.array(fc.double({ min: 0.05, max: 60_000, noNaN: true }), { minLength: 20, maxLength: 500 }),
        fc.constantFrom(0.5, 0.9, 0.99),
        (samples, quantile) => {
          // No decay: every sample weighs the same, and the exact percentile is comparable.
          const time = new ServiceTime({ quantile, halfLife: Number.POSITIVE_INFINITY });
          for (const ms of samples) time.record(ms);
          const estimate = time.estimate() as number;
          const truth = exact(samples, quantile);
          return estimate >= truth * (1 - 1e-9) && estimate <= truth * 1.1 * (1 + 1e-9);
        },
      ),
      { numRuns: 2_000 },
    );
  });

  it('follows a route whose cost changes, and forgets a burst of outliers, within a few half-lives', () => {
    const time = new ServiceTime({ halfLife: 100 });
    for (let i = 0; i < 1_000; i++) time.record(500);
    expect(time.estimate()).toBeGreaterThanOrEqual(500);
    for (let i = 0; i < 1_000; i++) time.record(5);
    expect(time.estimate()).toBeLessThan(5.5);
    // A burst: 50 requests stalled for 30 s, then the route is itself again.
    for (let i = 0; i < 50; i++) time.record(30_000);
    expect(time.estimate()).toBeGreaterThan(10_000);
    for (let i = 0; i < 500; i++) time.record(5);
    expect(time.estimate()).toBeLessThan(5.5);
  });

  it('says nothing before its warm-up; ignores what is not a duration; clamps at 60 s', () => {
    const time = new ServiceTime({ warmup: 3 });
    time.record(10);
    time.record(10);
    expect(time.estimate()).toBeUndefined();
    for (const bad of [Number.NaN, -1, Number.POSITIVE_INFINITY, Number.NEGATIVE_INFINITY]) time.record(bad);
    expect(time.samples).toBe(2);
    expect(time.estimate()).toBeUndefined();
    time.record(1e9);
    expect(time.samples).toBe(3);
    expect(time.estimate()).toBeLessThanOrEqual(66_000);
  });

  it('stays finite however long it runs, the newest samples weighing most', () => {
    // A half-life of one sample: each weighs twice the last, rescaled every 64.
    const time = new ServiceTime({ halfLife: 1, quantile: 0.5 });
    for (let i = 0; i < 10_000; i++) time.record(i % 2 === 0 ? 1 : 100);
    const estimate = time.estimate() as number;
    expect(Number.isFinite(estimate)).toBe(true);
    // The last sample (100 ms) outweighs all before it together.
    expect(estimate).toBeGreaterThanOrEqual(100);
  });

  it('gives another percentile on request, from the same samples, within a bucket of the exact one', () => {
    fc.assert(
      fc.property(
        fc.array(fc.double({ min: 0.05, max: 60_000, noNaN: true }), { minLength: 20, maxLength: 300 }),
        fc.constantFrom(0.1, 0.5, 0.99),
        (samples, quantile) => {
          const time = new ServiceTime({ quantile: 0.9, halfLife: Number.POSITIVE_INFINITY });
          for (const ms of samples) time.record(ms);
          const estimate = time.estimate(quantile) as number;
          const truth = exact(samples, quantile);
          // Asking for another percentile leaves the default's cached answer alone.
          const defaultOne = time.estimate() as number;
          return (
            estimate >= truth * (1 - 1e-9) &&
            estimate <= truth * 1.1 * (1 + 1e-9) &&
            defaultOne >= exact(samples, 0.9) * (1 - 1e-9)
          );
        },
      ),
      { numRuns: 1_000 },
    );
  });

  it('fades its history: after fade(0.25) a new sample weighs as four of the old, and a bad factor is ignored', () => {
    const time = new ServiceTime({ quantile: 0.5, halfLife: Number.POSITIVE_INFINITY, warmup: 1 });
    for (let i = 0; i < 3; i++) time.record(100);
    time.fade(0.25);
    time.record(1);
    // 3 old samples (weighing 3) against one new one weighing 4: the median is the new one's.
    expect(time.estimate()).toBeLessThan(1.2);
    for (const bad of [0, 1, -1, Number.NaN, 2]) time.fade(bad);
    expect(time.estimate()).toBeLessThan(1.2);
  });

  it('answers another percentile afresh after each sample, though it keeps it between samples', () => {
    const time = new ServiceTime({ quantile: 0.9, halfLife: Number.POSITIVE_INFINITY, warmup: 1 });
    for (let i = 0; i < 10; i++) time.record(10);
    expect(time.estimate(0.1)).toBeLessThan(11);
    for (let i = 0; i < 100; i++) time.record(1_000);
    expect(time.estimate(0.1)).toBeGreaterThanOrEqual(1_000);
    expect(time.estimate(0.5)).toBeGreaterThanOrEqual(1_000);
    time.record(1);
    expect(time.estimate(0.005)).toBeLessThan(1.2);
  });
});
