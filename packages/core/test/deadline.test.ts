import { afterEach, beforeEach, describe, expect, it, vi } from 'vitest';
import { Deadline, InvalidArgumentError } from '../src/index.ts';

describe('Deadline (fake clock)', () => {
  beforeEach(() => {
    vi.useFakeTimers({ toFake: ['performance', 'setTimeout', 'clearTimeout', 'Date'] });
  });
  afterEach(() => {
    vi.useRealTimers();
  });

  it('counts down on the monotonic clock and never goes negative', () => {
    const d = Deadline.fromNow(800);
    expect(d.budgetMs).toBe(800);
    expect(d.remainingMs()).toBe(800);
    vi.advanceTimersByTime(300);
    expect(d.remainingMs()).toBe(500);
    expect(d.elapsedMs()).toBe(300);
    expect(d.isExpired()).toBe(false);
    vi.advanceTimersByTime(500);
    expect(d.remainingMs()).toBe(0);
    expect(d.isExpired()).toBe(true);
    vi.advanceTimersByTime(10_000);
    expect(d.remainingMs()).toBe(0);
  });

  it('ignores wall-clock jumps', () => {
    const d = Deadline.fromNow(1_000);
    vi.setSystemTime(Date.now() + 3_600_000); // NTP step: an hour forward
    expect(d.remainingMs()).toBe(1_000);
    vi.setSystemTime(Date.now() - 7_200_000); // and two back
    expect(d.remainingMs()).toBe(1_000);
  });

  it('child() takes the earlier deadline and never extends', () => {
    const d = Deadline.fromNow(500);
    expect(d.child(1_000)).toBe(d);
    const shorter = d.child(200);
    expect(shorter.remainingMs()).toBe(200);
    vi.advanceTimersByTime(400);
    // 100 ms left: a child of 300 ms is still the parent.
    expect(d.child(300)).toBe(d);
    expect(d.child(50).remainingMs()).toBe(50);
    expect(d.earlier(Deadline.NONE)).toBe(d);
    expect(Deadline.NONE.earlier(d)).toBe(d);
  });

  it('represents "no deadline"', () => {
    const none = Deadline.NONE;
    expect(none.isNone).toBe(true);
    expect(none.remainingMs()).toBe(Number.POSITIVE_INFINITY);
    expect(none.budgetMs).toBe(Number.POSITIVE_INFINITY);
    expect(none.isExpired()).toBe(false);
    expect(none.elapsedMs()).toBe(0);
    expect(Deadline.fromNow(Number.POSITIVE_INFINITY)).toBe(none);
    expect(none.child(100).remainingMs()).toBe(100);
    expect(String(none)).toBe('Deadline(none)');
    expect(none.toJSON()).toEqual({ budgetMs: null, remainingMs: null });
  });

  it('treats zero and negative budgets as already expired, and rejects NaN', () => {
    expect(Deadline.fromNow(0).isExpired()).toBe(true);
    expect(Deadline.fromNow(-50).remainingMs()).toBe(0);
    expect(Deadline.fromNow(Number.NEGATIVE_INFINITY).isExpired()).toBe(true);
    expect(() => Deadline.fromNow(Number.NaN)).toThrow(InvalidArgumentError);
    expect(() => Deadline.fromNow('100' as unknown as number)).toThrow(/ms must be a number/);
  });

  it('anchors at a given monotonic instant', () => {
    const arrived = performance.now();
    vi.advanceTimersByTime(40);
    const d = Deadline.at(arrived + 500, arrived);
    expect(d.budgetMs).toBe(500);
    expect(d.remainingMs()).toBe(460);
    expect(d.elapsedMs()).toBe(40);
    expect(Deadline.at(Number.POSITIVE_INFINITY)).toBe(Deadline.NONE);
    expect(Deadline.at(arrived - 10, arrived).isExpired()).toBe(true);
    expect(() => Deadline.at(Number.NaN)).toThrow(InvalidArgumentError);
    expect(() => Deadline.at(1, Number.NaN)).toThrow(/startedAt/);
  });

  it('reads its budget back as set, whatever the instant it was anchored at', () => {
    // (x + 250) - x is not 250 for most large x: the budget must not carry that noise into answers and logs.
    for (const arrived of [
      393.742_155_204_712_7,
      8_091.278_420_230_275,
      524_118.587_685_378_2,
      30 * 86_400_000 + 0.333,
    ]) {
      expect(Deadline.at(arrived + 250, arrived).budgetMs).toBe(250);
      expect(Deadline._anchored(arrived, 0.5).budgetMs).toBe(0.5);
    }
  });

  it('is immutable and prints itself for logs', () => {
    const d = Deadline.fromNow(250);
    expect(() => {
      (d as { expiresAt: number }).expiresAt = 0;
    }).toThrow(TypeError);
    expect(() => {
      (d as { startedAt: number }).startedAt = 0;
    }).toThrow(TypeError);
    expect(d.budgetMs).toBe(250);
    expect(JSON.stringify(d)).toBe('{"budgetMs":250,"remainingMs":250}');
    expect(String(d)).toBe('Deadline(250 ms left of 250 ms)');
  });
});

describe('Deadline (real clock)', () => {
  it('expires for real', async () => {
    const d = Deadline.fromNow(30);
    expect(d.isExpired()).toBe(false);
    await new Promise((resolve) => setTimeout(resolve, 60));
    expect(d.isExpired()).toBe(true);
    expect(d.remainingMs()).toBe(0);
    expect(d.elapsedMs()).toBeGreaterThanOrEqual(30);
  });

  it('is recognised across copies of the package', async () => {
    const other = (await import('../src/deadline.ts?copy=2')) as typeof import('../src/deadline.ts');
    expect(other.Deadline).not.toBe(Deadline);
    expect(other.Deadline.fromNow(10)).toBeInstanceOf(Deadline);
    expect(Deadline.fromNow(10)).toBeInstanceOf(other.Deadline);
    expect({ expiresAt: 1, startedAt: 0 }).not.toBeInstanceOf(Deadline);
  });
});
