/**
 * The soak as an SVG timeline, a plain string: three panels over the run's time — goodput (answers in time per
 * second), the latency of the requests with enough budget (median and p99 per 5 s), and each process's RSS —
 * with the faults shaded across all three.
 */
import { escapeXml, fixed, niceScale, svgText as text } from '@deadline/bench/svg';
import type { SoakResult } from './soak.js';
import type { Verdict } from './verdict.js';

const WIDTH = 900;
const MARGIN = { top: 86, right: 150, bottom: 44, left: 64 };
const PANEL_HEIGHT = 150;
const PANEL_GAP = 34;
const HEIGHT = MARGIN.top + 3 * PANEL_HEIGHT + 2 * PANEL_GAP + MARGIN.bottom;
const SERVICE_COLORS: Record<string, string> = {
  gateway: '#1f6feb',
  orders: '#2f9e44',
  inventory: '#d9480f',
  worker: '#7048e8',
};
const FAULT_LABELS: Record<string, string> = {
  'postgres-restart': 'PostgreSQL restart',
  'redis-restart': 'Redis restart',
  'mariadb-kill': 'MariaDB KILL',
  'hop-paused': 'inventory SIGSTOP',
  'slow-drip': 'slow drip',
};

interface Series {
  label: string;
  color: string;
  points: [number, number][];
  dashed?: boolean;
}

/** What the chart draws, small enough to keep in the report (times in ms from the start of the load). */
export interface Timeline {
  durationMs: number;
  rate: number;
  capacity: number | undefined;
  pass: boolean;
  faults: SoakResult['faults'];
  /** Answers in time per second. */
  goodput: [number, number][];
  /** The reads with enough budget answered in time, per 5 s: p99 and median latency (ms). */
  latency: { p99: [number, number][]; median: [number, number][] };
  /** Each process's RSS (MB) at each sample. */
  rss: Record<string, [number, number][]>;
}

/**
 * The series of a soak's timeline, from its records and samples.
 *
 * @example
 * ```ts
 * const timeline = timelineOf(result, judge(result));
 * ```
 */
export function timelineOf(result: SoakResult, verdict: Verdict): Timeline {
  const seconds = Math.ceil(result.durationMs / 1000);
  const [p99, median] = latency(result, seconds);
  return {
    durationMs: result.durationMs,
    rate: result.rate,
    capacity: result.capacity,
    pass: verdict.pass,
    faults: result.faults,
    goodput: goodput(result, seconds),
    latency: { p99: p99?.points ?? [], median: median?.points ?? [] },
    rss: Object.fromEntries(rss(result).map((s) => [s.label, s.points])),
  };
}

/**
 * Renders a soak's timeline as a standalone SVG document.
 *
 * @example
 * ```ts
 * writeFileSync('soak-timeline.svg', renderTimeline(timelineOf(result, judge(result))));
 * ```
 */
export function renderTimeline(timeline: Timeline): string {
  const seconds = Math.ceil(timeline.durationMs / 1000);
  const plotW = WIDTH - MARGIN.left - MARGIN.right;
  const px = (ms: number) => MARGIN.left + (Math.min(Math.max(ms, 0), seconds * 1000) / (seconds * 1000)) * plotW;
  const parts = [
    `<svg xmlns="http://www.w3.org/2000/svg" width="${WIDTH}" height="${HEIGHT}" viewBox="0 0 ${WIDTH} ${HEIGHT}" font-family="system-ui, -apple-system, 'Segoe UI', sans-serif" font-size="12" role="img"><title>Soak timeline: goodput, latency and memory through the faults</title>`,
    `<rect width="${WIDTH}" height="${HEIGHT}" fill="#ffffff"/>`,
    text(
      MARGIN.left,
      26,
      `Soak: ${seconds / 60} minutes of mixed load through five faults`,
      'font-size="16" font-weight="600" fill="#111"',
    ),
    text(
      MARGIN.left,
      46,
      `${timeline.rate} req/s${timeline.capacity === undefined ? '' : ` (${Math.round((100 * timeline.rate) / timeline.capacity)} % of ${Math.round(timeline.capacity)} measured)`}: 60 % enough budget, 30 % too small, 5 % hang up, 5 % retried charges — ${timeline.pass ? 'passed' : 'FAILED'}`,
      'fill="#555" font-size="11"',
    ),
  ];
  const top = (panel: number) => MARGIN.top + panel * (PANEL_HEIGHT + PANEL_GAP);
  // Faults first, under the lines.
  for (const [index, fault] of timeline.faults.entries()) {
    const x = px(fault.startedAt);
    const w = Math.max(2, px(fault.clearedAt) - x);
    // Labels on two rows, alternately: faults a minute apart are closer than a label is long.
    const labelY = top(0) - 4 - (index % 2) * 13;
    parts.push(
      `<rect x="${fixed(x)}" y="${top(0)}" width="${fixed(w)}" height="${top(2) + PANEL_HEIGHT - top(0)}" fill="#fa5252" fill-opacity="0.18"><title>${escapeXml(fault.detail)}</title></rect>`,
      `<line x1="${fixed(x)}" y1="${fixed(labelY + 2)}" x2="${fixed(x)}" y2="${top(0)}" stroke="#c92a2a" stroke-width="0.5"/>`,
      text(x + 2, labelY, FAULT_LABELS[fault.kind] ?? fault.kind, 'fill="#c92a2a" font-size="10"'),
    );
  }
  parts.push(
    ...panel(top(0), 'goodput (answers in time /s)', [
      { label: 'goodput', color: '#1f6feb', points: timeline.goodput },
    ]),
    ...panel(top(1), 'latency, enough budget (ms)', [
      { label: 'p99', color: '#d9480f', points: timeline.latency.p99 },
      { label: 'median', color: '#1f6feb', points: timeline.latency.median },
    ]),
    ...panel(
      top(2),
      'RSS (MB)',
      Object.entries(timeline.rss).map(([service, points]) => ({
        label: service,
        color: SERVICE_COLORS[service] ?? '#555',
        points,
      })),
    ),
  );
  // The time axis, under the last panel.
  const axisY = top(2) + PANEL_HEIGHT;
  const step = niceScale(seconds).step;
  for (let s = 0; s <= seconds + 1e-9; s += step) {
    parts.push(
      `<line x1="${fixed(px(s * 1000))}" y1="${axisY}" x2="${fixed(px(s * 1000))}" y2="${axisY + 5}" stroke="#333"/>`,
      text(px(s * 1000), axisY + 18, `${Math.round(s)} s`, 'text-anchor="middle" fill="#333"'),
    );
  }
  parts.push('</svg>');
  return parts.join('\n');

  function panel(y0: number, title: string, series: Series[]): string[] {
    const maxValue = Math.max(1, ...series.flatMap((s) => s.points.map(([, v]) => v)));
    const scale = niceScale(maxValue);
    const py = (v: number) => y0 + PANEL_HEIGHT - (v / scale.max) * PANEL_HEIGHT;
    const out: string[] = [];
    for (let v = 0; v <= scale.max + 1e-9; v += scale.step) {
      out.push(
        `<line x1="${MARGIN.left}" y1="${fixed(py(v))}" x2="${MARGIN.left + plotW}" y2="${fixed(py(v))}" stroke="#eee"/>`,
        text(MARGIN.left - 6, py(v) + 4, `${Math.round(v * 10) / 10}`, 'text-anchor="end" fill="#333" font-size="11"'),
      );
    }
    out.push(
      `<rect x="${MARGIN.left}" y="${y0}" width="${plotW}" height="${PANEL_HEIGHT}" fill="none" stroke="#999"/>`,
      text(MARGIN.left + 4, y0 + 14, title, 'fill="#222" font-weight="600"'),
    );
    for (const [row, s] of series.entries()) {
      const points = s.points.map(([t, v]) => `${fixed(px(t))},${fixed(py(v))}`).join(' ');
      out.push(
        `<polyline points="${points}" fill="none" stroke="${s.color}" stroke-width="1.5"${s.dashed ? ' stroke-dasharray="5 3"' : ''}/>`,
        `<line x1="${MARGIN.left + plotW + 12}" y1="${y0 + 12 + row * 16}" x2="${MARGIN.left + plotW + 32}" y2="${y0 + 12 + row * 16}" stroke="${s.color}" stroke-width="2"${s.dashed ? ' stroke-dasharray="5 3"' : ''}/>`,
        text(MARGIN.left + plotW + 36, y0 + 16 + row * 16, s.label, 'fill="#222" font-size="11"'),
      );
    }
    return out;
  }
}

/** Answers in time per second, by the second they came in. */
function goodput(result: SoakResult, seconds: number): [number, number][] {
  const counts = new Array<number>(seconds).fill(0);
  for (const r of result.records) {
    const s = Math.floor(r.doneAt / 1000);
    if (r.ok && s >= 0 && s < seconds) counts[s] = (counts[s] ?? 0) + 1;
  }
  return counts.map((n, s) => [s * 1000 + 500, n]);
}

/** Median and p99 of the reads with enough budget answered in time, per 5 s by when they were sent. */
function latency(result: SoakResult, seconds: number): Series[] {
  const bucketMs = 5_000;
  const buckets: number[][] = Array.from({ length: Math.ceil((seconds * 1000) / bucketMs) }, () => []);
  for (const r of result.records) {
    if (!r.enoughBudget || !r.ok) continue;
    buckets[Math.floor(r.sentAt / bucketMs)]?.push(r.doneAt - r.sentAt);
  }
  const quantile = (values: number[], q: number) => {
    const sorted = [...values].sort((a, b) => a - b);
    return sorted[Math.min(sorted.length - 1, Math.max(0, Math.ceil(q * sorted.length) - 1))] as number;
  };
  const at = (i: number) => i * bucketMs + bucketMs / 2;
  const filled = buckets.map((b, i) => [i, b] as const).filter(([, b]) => b.length > 0);
  return [
    { label: 'p99', color: '#d9480f', points: filled.map(([i, b]) => [at(i), quantile(b, 0.99)]) },
    { label: 'median', color: '#1f6feb', points: filled.map(([i, b]) => [at(i), quantile(b, 0.5)]) },
  ];
}

function rss(result: SoakResult): Series[] {
  return Object.entries(result.samples).map(([service, samples]) => ({
    label: service,
    color: SERVICE_COLORS[service] ?? '#555',
    points: samples.map((s) => [s.at, s.rssBytes / 2 ** 20] as [number, number]),
  }));
}
