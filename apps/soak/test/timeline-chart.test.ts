/** The soak's timeline chart: a standalone SVG with the three panels and every fault marked, from the report alone. */
import { describe, expect, it } from 'vitest';
import type { SoakResult } from '../src/soak.ts';
import { renderTimeline, timelineOf } from '../src/timeline-chart.ts';
import type { Verdict } from '../src/verdict.ts';

const result = {
  durationMs: 60_000,
  rate: 60,
  capacity: 90,
  records: Array.from({ length: 3_600 }, (_, i) => ({
    kind: 'read' as const,
    budgetMs: 1_000,
    sentAt: i * (60_000 / 3_600),
    doneAt: i * (60_000 / 3_600) + 40,
    ok: true,
    enoughBudget: true,
    status: 200,
    circuitOpen: false,
  })),
  faults: [
    { kind: 'postgres-restart' as const, startedAt: 9_000, clearedAt: 9_200, detail: 'PostgreSQL <restarted> & back' },
    { kind: 'slow-drip' as const, startedAt: 39_000, clearedAt: 44_000, detail: 'drip' },
  ],
  samples: {
    gateway: [{ at: 0, rssBytes: 100 * 2 ** 20, youngBytes: 0, heapBytes: 0, resources: {}, abortListeners: 0 }],
  },
} as unknown as SoakResult;

describe('the timeline', () => {
  it('draws goodput, latency and RSS, marks each fault with its detail escaped, and keeps to its data', () => {
    const timeline = timelineOf(result, { pass: true } as Verdict);
    expect(timeline.goodput).toHaveLength(60);
    expect(timeline.goodput[10]).toEqual([10_500, 60]);
    expect(timeline.latency.median[0]?.[1]).toBeCloseTo(40, 5);
    expect(timeline.rss.gateway).toEqual([[0, 100]]);
    const svg = renderTimeline(timeline);
    expect(svg).toMatch(/^<svg [^>]*viewBox="0 0 900 \d+"[\s\S]*<\/svg>$/);
    for (const title of ['goodput (answers in time /s)', 'latency, enough budget (ms)', 'RSS (MB)']) {
      expect(svg).toContain(title);
    }
    expect(svg).toContain('PostgreSQL restart');
    expect(svg).toContain('<title>PostgreSQL &lt;restarted&gt; &amp; back</title>');
    expect(svg).toContain('— passed');
    // Round-trips through JSON, as the report keeps it.
    expect(renderTimeline(JSON.parse(JSON.stringify(timeline)))).toBe(svg);
  });
});
