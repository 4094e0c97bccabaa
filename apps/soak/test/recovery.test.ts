/** Recovery and latency read off a soak's load records (synthetic: the functions are pure). */
import { describe, expect, it } from 'vitest';
import { type LoadRecord, okPerSecond, p99WithEnoughBudget, recoveryMs } from '../src/recovery.ts';

/** `perSecond` answers a second from `from` to `to` (ms), each `latencyMs` long; `ok` as given. */
function load(from: number, to: number, perSecond: number, latencyMs: number, ok = true): LoadRecord[] {
  const records: LoadRecord[] = [];
  for (let t = from; t < to; t += 1000 / perSecond) {
    records.push({ sentAt: t, doneAt: t + latencyMs, ok, enoughBudget: true });
  }
  return records;
}

describe('recoveryMs', () => {
  const fault = { startedAt: 20_000, clearedAt: 30_000 };

  it('the time from the fault clearing to goodput back at 90 % of its level before, held for a second', () => {
    const records = [
      ...load(0, 20_000, 70, 10),
      ...load(20_000, 31_500, 70, 10, false), // the fault, and 1.5 s after it cleared
      ...load(31_500, 40_000, 70, 10),
    ];
    expect(recoveryMs(records, fault)).toBe(1_500);
  });

  it('back at once when the fault never hurt; null when it never came back or there was nothing before', () => {
    expect(recoveryMs(load(0, 40_000, 70, 10), fault)).toBe(0);
    const never = [...load(0, 20_000, 70, 10), ...load(20_000, 40_000, 70, 10, false)];
    expect(recoveryMs(never, fault)).toBeNull();
    expect(recoveryMs(load(20_000, 40_000, 70, 10), fault)).toBeNull();
  });

  it('a brief recovery that falls back does not count: it must hold', () => {
    const records = [
      ...load(0, 20_000, 70, 10),
      ...load(20_000, 30_000, 70, 10, false),
      ...load(30_000, 30_500, 70, 10),
      ...load(30_500, 32_000, 70, 10, false),
      ...load(32_000, 40_000, 70, 10),
    ];
    expect(recoveryMs(records, fault)).toBe(2_000);
  });
});

describe('okPerSecond and p99WithEnoughBudget', () => {
  it('count what ended in the window, and take the 99th percentile of the answered with enough budget', () => {
    const records = [...load(0, 10_000, 100, 20), ...load(0, 10_000, 2, 900)];
    expect(okPerSecond(records, 0, 10_000)).toBeCloseTo(102, 0);
    expect(okPerSecond(records, 5, 5)).toBe(0);
    // 1,020 requests, twenty of them slow (2 %): the 99th percentile is one of those.
    expect(p99WithEnoughBudget(records, 0, 10_000)).toBe(900);
    const tooShort = records.map((r) => ({ ...r, enoughBudget: r.doneAt - r.sentAt < 100 }));
    expect(p99WithEnoughBudget(tooShort, 0, 10_000)).toBe(20);
    expect(p99WithEnoughBudget([], 0, 1)).toBeNull();
  });
});
