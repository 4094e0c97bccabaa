/** Recovery and latency read off a soak's load records (synthetic: the functions are pure). */
import { describe, expect, it } from 'vitest';
import {
  firstAnswerMs,
  type LoadRecord,
  longestWaitMs,
  okPerSecond,
  p99WithEnoughBudget,
  recoveryMs,
} from '../src/recovery.ts';

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

describe('firstAnswerMs', () => {
  const fault = { startedAt: 20_000, clearedAt: 20_400 };

  it('from the fault clearing to the first answer in time, to a call made since the fault began', () => {
    const records = [
      ...load(0, 20_000, 50, 10),
      ...load(20_000, 20_700, 50, 10, false), // refused until 300 ms after the server was back (pools reconnecting)
      ...load(20_700, 30_000, 50, 300), // then answered, slowly: a busy machine
    ];
    expect(firstAnswerMs(records, fault)).toBe(600);
  });

  it('a call that waited through the fault counts; one made before it began does not, though answered after', () => {
    const records = [
      { sentAt: 19_990, doneAt: 20_420, ok: true, enoughBudget: true }, // its query may have run on the old server
      { sentAt: 20_450, doneAt: 21_300, ok: true, enoughBudget: true },
      { sentAt: 20_100, doneAt: 20_950, ok: true, enoughBudget: true }, // waited for the new server's sessions
      { sentAt: 20_200, doneAt: 20_390, ok: true, enoughBudget: true }, // answered before the server said it was back
    ];
    expect(firstAnswerMs(records, fault)).toBe(550);
    expect(firstAnswerMs(records.slice(0, 2), fault)).toBe(900);
  });

  it('only the calls through what broke, when told which; null when none was answered in time', () => {
    const records = [
      { sentAt: 20_500, doneAt: 20_520, ok: true, enoughBudget: false },
      { sentAt: 20_600, doneAt: 21_600, ok: false, enoughBudget: true }, // given up on at its budget
      { sentAt: 21_000, doneAt: 21_050, ok: true, enoughBudget: true },
    ];
    expect(firstAnswerMs(records, fault)).toBe(120);
    expect(firstAnswerMs(records, fault, (r) => r.enoughBudget)).toBe(650);
    expect(firstAnswerMs(records.slice(0, 2), fault, (r) => r.enoughBudget)).toBeNull();
    expect(firstAnswerMs([], fault)).toBeNull();
  });
});

describe('longestWaitMs', () => {
  it('the longest stretch of a window without an answer in time: at its start, between two, at its end', () => {
    expect(longestWaitMs(load(0, 10_000, 50, 10), 2_000, 4_000)).toBe(20);
    const gaps = [
      { sentAt: 0, doneAt: 1_300, ok: true, enoughBudget: true },
      { sentAt: 1_000, doneAt: 2_100, ok: false, enoughBudget: true }, // not in time: no answer
      { sentAt: 2_000, doneAt: 2_200, ok: true, enoughBudget: true },
      { sentAt: 2_100, doneAt: 2_400, ok: true, enoughBudget: false },
    ];
    expect(longestWaitMs(gaps, 1_000, 3_000)).toBe(900);
    expect(longestWaitMs(gaps, 1_000, 2_000)).toBe(700);
    expect(longestWaitMs(gaps, 2_250, 3_000)).toBe(600);
    expect(longestWaitMs(gaps, 2_250, 3_000, (r) => r.enoughBudget)).toBe(750);
    expect(longestWaitMs(gaps, 1_500, 3_000, (r) => !r.enoughBudget)).toBe(900);
    expect(longestWaitMs([], 1_000, 3_000)).toBe(2_000);
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
