/**
 * The overload benchmark as an SVG chart, a plain string (no dependencies): goodput (left axis, req/s) and dead
 * work (right axis, % of the database's busy time; on the CPU-bound chain, of handler CPU and database time) against
 * the load (× capacity), one line of each per variant run (with the library and without; with under-pressure, with
 * admission).
 */

import { escapeXml, fixed, niceScale, svgText as text } from '../shared/svg.js';
import type { LevelResult, OverloadReport } from './overload.js';
import type { ChainVariant } from './overload-protocol.js';

const WIDTH = 760;
const COLORS: Record<ChainVariant, string> = {
  library: '#1f6feb',
  baseline: '#d9480f',
  'library+under-pressure': '#9c36b5',
  'library+admission': '#2b8a3e',
};
const LABELS: Record<ChainVariant, string> = {
  library: 'with the library',
  baseline: 'fixed timeouts only',
  'library+under-pressure': 'library + under-pressure',
  'library+admission': 'library with admission',
};

/** Renders the report as a standalone SVG document. */
export function renderOverloadChart(report: OverloadReport): string {
  // One legend row per variant: two fit above the plot as it always was; more push it down.
  const extraRows = Math.max(0, report.variants.length - 2);
  const HEIGHT = 480 + extraRows * 16;
  const MARGIN = { top: 96 + extraRows * 16, right: 70, bottom: 58, left: 70 };
  const open = `<svg xmlns="http://www.w3.org/2000/svg" width="${WIDTH}" height="${HEIGHT}" viewBox="0 0 ${WIDTH} ${HEIGHT}" font-family="system-ui, -apple-system, 'Segoe UI', sans-serif" font-size="12" role="img"><title>Goodput and dead work against load, with the library and with fixed per-hop timeouts</title>`;
  const background = `<rect width="${WIDTH}" height="${HEIGHT}" fill="#ffffff"/>`;
  const title = text(
    MARGIN.left,
    26,
    'Dead work under overload: goodput and dead work against load',
    'font-size="16" font-weight="600" fill="#111"',
  );
  if (report.skipped !== null || report.setup === null || report.capacity === null) {
    return [
      open,
      background,
      title,
      text(MARGIN.left, 60, `Not measured: ${report.skipped ?? 'no data'}`, 'fill="#555"'),
      '</svg>',
    ].join('\n');
  }
  const setup = report.setup;
  const capacity = report.capacity;
  const cpuBound = setup.bottleneck === 'cpu';
  const deadWorkOf = (l: LevelResult) => (cpuBound ? l.deadWork : l.database.deadWork);
  const budgets = setup.budgetMix
    .map((b) => `${Math.round(b.share * 100)} % ${b.ms >= 1000 ? `${b.ms / 1000} s` : `${b.ms} ms`}`)
    .join(', ');
  const multipliers = [...new Set(report.variants.flatMap((v) => v.levels.map((l) => l.multiplier)))].sort(
    (a, b) => a - b,
  );
  const xMax = Math.max(1, ...multipliers) * 1.05;
  const offeredMax = Math.max(...multipliers) * capacity;
  const goodputMax = Math.max(offeredMax, ...report.variants.flatMap((v) => v.levels.map((l) => l.goodput)));
  const y = niceScale(goodputMax);
  const plotW = WIDTH - MARGIN.left - MARGIN.right;
  const plotH = HEIGHT - MARGIN.top - MARGIN.bottom;
  const px = (m: number) => MARGIN.left + (m / xMax) * plotW;
  const pyLeft = (v: number) => MARGIN.top + plotH - (v / y.max) * plotH;
  const pyRight = (fraction: number) => MARGIN.top + plotH - fraction * plotH;
  const parts: string[] = [open, background, title];
  parts.push(
    text(
      MARGIN.left,
      44,
      cpuBound
        ? `Three-hop chain, ${setup.cpuMsPerHop} ms of CPU per request per hop; budgets ${budgets}; capacity ${capacity} req/s${report.quick ? ' (quick run)' : ''}`
        : `Three-hop chain, pg_sleep(${setup.workMs} ms) on a pool of ${setup.poolSize}, ${setup.budgetMs} ms client budget; capacity ${capacity} req/s${report.quick ? ' (quick run: not a measurement)' : ''}`,
      'fill="#555" font-size="11"',
    ),
  );
  // Grid and axes.
  for (let v = 0; v <= y.max + 1e-9; v += y.step) {
    const yy = pyLeft(v);
    parts.push(
      `<line x1="${MARGIN.left}" y1="${fixed(yy)}" x2="${MARGIN.left + plotW}" y2="${fixed(yy)}" stroke="#e5e5e5"/>`,
      text(MARGIN.left - 8, yy + 4, `${Math.round(v)}`, 'text-anchor="end" fill="#333"'),
    );
  }
  // The right axis has ticks of its own: dead work in %.
  for (let percent = 0; percent <= 100; percent += 20) {
    const yy = pyRight(percent / 100);
    parts.push(
      `<line x1="${MARGIN.left + plotW}" y1="${fixed(yy)}" x2="${MARGIN.left + plotW + 5}" y2="${fixed(yy)}" stroke="#333"/>`,
      text(MARGIN.left + plotW + 8, yy + 4, `${percent} %`, 'fill="#333"'),
    );
  }
  for (const m of multipliers) {
    parts.push(
      `<line x1="${fixed(px(m))}" y1="${MARGIN.top + plotH}" x2="${fixed(px(m))}" y2="${MARGIN.top + plotH + 5}" stroke="#333"/>`,
      text(px(m), MARGIN.top + plotH + 18, `${m}×`, 'text-anchor="middle" fill="#333"'),
    );
  }
  parts.push(
    `<rect x="${MARGIN.left}" y="${MARGIN.top}" width="${plotW}" height="${plotH}" fill="none" stroke="#999"/>`,
    text(
      MARGIN.left + plotW / 2,
      HEIGHT - 14,
      'offered load (× capacity), open loop',
      'text-anchor="middle" fill="#333"',
    ),
    text(
      0,
      0,
      'goodput (answers in time, req/s) — solid',
      `transform="translate(18 ${MARGIN.top + plotH / 2}) rotate(-90)" text-anchor="middle" fill="#333"`,
    ),
    text(
      0,
      0,
      cpuBound ? 'dead work (% of handler + DB CPU) — dashed' : 'dead work (% of DB busy time) — dashed',
      `transform="translate(${WIDTH - 14} ${MARGIN.top + plotH / 2}) rotate(90)" text-anchor="middle" fill="#333"`,
    ),
  );
  // The offered load: what goodput would be if every request were answered in time.
  parts.push(
    `<line x1="${fixed(px(0))}" y1="${fixed(pyLeft(0))}" x2="${fixed(px(Math.max(...multipliers)))}" y2="${fixed(pyLeft(offeredMax))}" stroke="#aaa" stroke-dasharray="2 3"/>`,
    text(
      px(Math.max(...multipliers)) - 4,
      pyLeft(offeredMax) - 6,
      'offered',
      'text-anchor="end" fill="#888" font-size="11"',
    ),
  );
  // The baseline first and wider, the library over it: where they coincide, both stay visible.
  const drawOrder = [...report.variants].sort((a, b) =>
    a.variant === 'baseline' ? -1 : b.variant === 'baseline' ? 1 : 0,
  );
  for (const variant of drawOrder) {
    const color = COLORS[variant.variant];
    const width = variant.variant === 'baseline' ? 5 : 2.5;
    const levels = [...variant.levels].sort((a, b) => a.multiplier - b.multiplier);
    const goodput = levels.map((l) => `${fixed(px(l.multiplier))},${fixed(pyLeft(l.goodput))}`);
    parts.push(
      `<polyline points="${goodput.join(' ')}" fill="none" stroke="${color}" stroke-width="${width}" stroke-opacity="${variant.variant === 'baseline' ? 0.55 : 1}"/>`,
    );
    for (const l of levels) {
      parts.push(
        `<circle cx="${fixed(px(l.multiplier))}" cy="${fixed(pyLeft(l.goodput))}" r="4" fill="${color}"><title>${escapeXml(`${LABELS[variant.variant]}, ${l.multiplier}×: ${l.goodput} answers/s in time`)}</title></circle>`,
      );
    }
    const dead = levels.filter((l) => deadWorkOf(l) !== null);
    if (dead.length > 0) {
      const points = dead.map((l) => `${fixed(px(l.multiplier))},${fixed(pyRight(deadWorkOf(l) as number))}`);
      parts.push(
        `<polyline points="${points.join(' ')}" fill="none" stroke="${color}" stroke-width="2" stroke-dasharray="7 5"/>`,
      );
      for (const l of dead) {
        const cx = px(l.multiplier);
        const cy = pyRight(deadWorkOf(l) as number);
        parts.push(
          `<rect x="${fixed(cx - 4)}" y="${fixed(cy - 4)}" width="8" height="8" fill="#fff" stroke="${color}" stroke-width="2"><title>${escapeXml(`${LABELS[variant.variant]}, ${l.multiplier}×: ${((deadWorkOf(l) as number) * 100).toFixed(1)} % dead work`)}</title></rect>`,
        );
      }
    }
  }
  // Legend: one row per variant.
  for (const [row, variant] of report.variants.entries()) {
    const color = COLORS[variant.variant];
    const ly = 62 + row * 16;
    const lx = MARGIN.left;
    parts.push(
      `<line x1="${lx}" y1="${ly}" x2="${lx + 22}" y2="${ly}" stroke="${color}" stroke-width="2.5"/>`,
      text(lx + 27, ly + 4, `goodput, ${LABELS[variant.variant]}`, 'fill="#222"'),
      `<line x1="${lx + 240}" y1="${ly}" x2="${lx + 262}" y2="${ly}" stroke="${color}" stroke-width="2" stroke-dasharray="7 5"/>`,
      text(lx + 267, ly + 4, `dead work, ${LABELS[variant.variant]}`, 'fill="#222"'),
    );
  }
  parts.push('</svg>');
  return parts.join('\n');
}
