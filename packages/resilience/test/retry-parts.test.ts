/** The pieces of retry(): the Retry-After parser (property-tested), the retry budget's window, the backoff. */
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { fullJitter } from '../src/backoff.ts';
import { parseRetryAfter, RetryBudget } from '../src/index.ts';

describe('parseRetryAfter', () => {
  it('never throws; returns undefined or a wait in [0, 24 h]', () => {
    fc.assert(
      fc.property(fc.oneof(fc.string(), fc.anything()), (value) => {
        const ms = parseRetryAfter(value);
        if (ms !== undefined) {
          expect(Number.isFinite(ms)).toBe(true);
          expect(ms).toBeGreaterThanOrEqual(0);
          expect(ms).toBeLessThanOrEqual(24 * 60 * 60 * 1000);
        }
      }),
      { numRuns: 50_000 },
    );
  });

  it('delay-seconds and HTTP-dates read exactly; junk and negatives ignored', () => {
    fc.assert(
      fc.property(fc.integer({ min: 0, max: 86_400 }), (seconds) => {
        expect(parseRetryAfter(String(seconds))).toBe(seconds * 1000);
        expect(parseRetryAfter(` ${seconds} `)).toBe(seconds * 1000);
        expect(parseRetryAfter(`-${seconds + 1}`)).toBeUndefined();
        expect(parseRetryAfter(`${seconds}.5`)).toBeUndefined();
      }),
    );
    const now = Date.parse('Wed, 21 Oct 2015 07:27:00 GMT');
    expect(parseRetryAfter('Wed, 21 Oct 2015 07:28:00 GMT', now)).toBe(60_000);
    expect(parseRetryAfter('Wed, 21 Oct 2015 07:26:00 GMT', now)).toBe(0);
    expect(parseRetryAfter(['120', '5'])).toBe(120_000);
    for (const junk of ['', 'soon', '1e3', '0x10', 'Infinity', 'NaN', '12345678901']) {
      expect(parseRetryAfter(junk)).toBeUndefined();
    }
  });
});

describe('RetryBudget', () => {
  it('retries are at most ratio × requests in the window, plus the floor', () => {
    let now = 0;
    const budget = new RetryBudget({ ratio: 0.2, minRetriesPerSecond: 1, ttlMs: 10_000, now: () => now });
    // The floor alone: 1/s over 10 s.
    expect(budget.available).toBe(10);
    for (let i = 0; i < 100; i++) budget.recordRequest();
    expect(budget.available).toBe(30);
    let granted = 0;
    while (budget.tryRetry()) granted++;
    expect(granted).toBe(30);
    // Requests and retries of a second leave the window exactly ttl later.
    now = 9_999;
    expect(budget.tryRetry()).toBe(false);
    now = 10_000;
    expect(budget.available).toBe(10);
  });

  it('ratio 0.1, no floor: exactly one retry per ten requests, whatever the order', () => {
    fc.assert(
      fc.property(fc.array(fc.boolean(), { maxLength: 500 }), (steps) => {
        const budget = new RetryBudget({ ratio: 0.1, minRetriesPerSecond: 0, now: () => 0 });
        let requests = 0;
        let retries = 0;
        for (const isRequest of steps) {
          if (isRequest) {
            budget.recordRequest();
            requests++;
          } else if (budget.tryRetry()) retries++;
        }
        expect(retries).toBeLessThanOrEqual(Math.floor(requests * 0.1 + 1e-9));
      }),
    );
  });

  it('a long idle clears the window (lazily, no timer)', () => {
    let now = 5_000;
    const budget = new RetryBudget({ ratio: 1, minRetriesPerSecond: 0, now: () => now });
    for (let i = 0; i < 5; i++) budget.recordRequest();
    expect(budget.available).toBe(5);
    now += 3_600_000;
    expect(budget.available).toBe(0);
  });

  it('bad options are refused, naming them', () => {
    expect(() => new RetryBudget({ ratio: -1 })).toThrow(/ratio/);
    expect(() => new RetryBudget({ ttlMs: 10 })).toThrow(/ttlMs/);
    expect(() => new RetryBudget({ now: 5 as never })).toThrow(/now/);
  });
});

describe('full-jitter backoff', () => {
  it('uniform in [0, min(cap, base · 2^(n−1))]', () => {
    fc.assert(
      fc.property(fc.integer({ min: 1, max: 80 }), fc.double({ min: 0, max: 0.999999, noNaN: true }), (n, r) => {
        const ms = fullJitter(n, 50, 1_000, () => r);
        expect(ms).toBeGreaterThanOrEqual(0);
        expect(ms).toBeLessThanOrEqual(Math.min(1_000, 50 * 2 ** (n - 1)));
      }),
    );
    expect(fullJitter(1, 50, 1_000, () => 0.999)).toBe(49);
    expect(fullJitter(3, 50, 1_000, () => 0.5)).toBe(100);
    expect(fullJitter(10, 50, 1_000, () => 0.5)).toBe(500);
  });
});
