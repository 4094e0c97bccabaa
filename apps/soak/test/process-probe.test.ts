/** Sampling a process (this one) and telling growth from noise. */
import { describe, expect, it } from 'vitest';
import { growthOf } from '../src/growth.ts';
import { type ProcessSample, sampleProcess } from '../src/process-probe.ts';

describe('sampleProcess', () => {
  it('collects first (with or without --expose-gc), then reads memory and the resources by type', () => {
    const timers = Array.from({ length: 3 }, () => setTimeout(() => {}, 60_000));
    try {
      const sample = sampleProcess();
      expect(sample.rssBytes).toBeGreaterThan(sample.heapBytes);
      expect(sample.heapBytes).toBeGreaterThan(0);
      expect(sample.resources.Timeout).toBeGreaterThanOrEqual(3);
      // The young generation's committed space: part of the RSS, never all of it.
      expect(sample.youngBytes).toBeGreaterThan(0);
      expect(sample.youngBytes).toBeLessThan(sample.rssBytes);
    } finally {
      for (const timer of timers) clearTimeout(timer);
    }
  });

  it('a heap that let go of what it held is back down after the collection', () => {
    const before = sampleProcess().heapBytes;
    let garbage: unknown[] | undefined = Array.from({ length: 200_000 }, (_, i) => ({ i }));
    expect(sampleProcess().heapBytes - before).toBeGreaterThan(4 << 20);
    garbage.length = 0;
    garbage = undefined;
    expect(sampleProcess().heapBytes - before).toBeLessThan(1 << 20);
  });
});

describe('growthOf', () => {
  const at = (seconds: number, heapMb: number, sockets: number): ProcessSample => ({
    at: seconds * 1000,
    rssBytes: (heapMb + 40) * 2 ** 20,
    youngBytes: 16 * 2 ** 20,
    heapBytes: heapMb * 2 ** 20,
    resources: { TCPSocketWrap: sockets, ...(seconds > 500 ? { Timeout: 1 } : {}) },
  });

  it('compares the medians of the first and the last window: a burst is not growth, a trend is', () => {
    // Ten minutes, a sample every 10 s: flat with one burst in the last minute.
    const flat = Array.from({ length: 61 }, (_, i) => at(i * 10, 20, i === 58 ? 40 : 4));
    expect(growthOf(flat, 60_000)).toMatchObject({ heapBytes: 0, rssBytes: 0, resources: { TCPSocketWrap: 0 } });
    // The young generation grown from 16 to 48 MB in the last minute: the RSS with it, not the RSS outside it.
    const younger = flat.map((s) =>
      s.at > 540_000 ? { ...s, youngBytes: 48 * 2 ** 20, rssBytes: s.rssBytes + 32 * 2 ** 20 } : s,
    );
    expect(growthOf(younger, 60_000)).toMatchObject({ rssBytes: 32 * 2 ** 20, rssOutsideYoungBytes: 0 });
    // One socket and 0.1 MB more per sample: a leak.
    const leaking = Array.from({ length: 61 }, (_, i) => at(i * 10, 20 + i / 10, 4 + i));
    const growth = growthOf(leaking, 60_000);
    expect(growth.heapBytes / 2 ** 20).toBeCloseTo(5.5, 5);
    expect(growth.resources.TCPSocketWrap).toBe(55);
    // A type seen only at the end counts from zero.
    expect(growth.resources.Timeout).toBe(1);
    expect(growth.samples).toEqual({ first: 6, last: 6 });
  });

  it('says so when there is nothing to compare', () => {
    expect(() => growthOf([], 60_000)).toThrow(RangeError);
    expect(() => growthOf([at(0, 1, 1)], 0)).toThrow(/positive number of ms/);
  });
});
