/**
 * The demo's results as one self-contained HTML page: inline CSS, the waterfall as inline SVG, no script and no
 * external asset, so it can be opened from disk or attached to an issue. Everything in it that came from a
 * scenario or a log line is escaped: it is built with a tagged template that escapes every interpolation.
 */
import { columnCount, formatCell, numericColumns, type ScenarioTable } from './table.js';
import { describeSpan, outcomeTone, type WaterfallSpan } from './waterfall.js';

/** What {@link renderHtmlReport} draws. */
export interface HtmlReportInput {
  title: string;
  generatedAt: Date;
  /** The machine the numbers were measured on (CPU, OS, Node version), as one line. */
  machine: string;
  tables: readonly ScenarioTable[];
  waterfall: readonly WaterfallSpan[];
  /** The trace the waterfall shows (none when no trace could be picked). */
  traceId: string | undefined;
}

/** The report as an HTML5 document. */
export function renderHtmlReport(input: HtmlReportInput): string {
  const page = html`<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>${input.title}</title>
<style>${raw(STYLE)}</style>
</head>
<body>
<header>
<h1>${input.title}</h1>
<p class="meta">Generated ${generatedAt(input.generatedAt)} on ${input.machine}</p>
</header>
<main>
${input.tables.map(tableSection)}
${waterfallSection(input.waterfall, input.traceId)}
</main>
</body>
</html>
`;
  return page.text;
}

// ---------------------------------------------------------------------------------------------------------------
// Escaping.

/** Markup that is already safe: only {@link html} and {@link raw} make one. */
class Markup {
  constructor(readonly text: string) {}
}

type Interpolation = Markup | string | number | readonly Markup[];

/** Like a template literal, except every interpolated value is escaped unless it is already {@link Markup}. */
function html(strings: TemplateStringsArray, ...values: readonly Interpolation[]): Markup {
  let text = strings[0] ?? '';
  values.forEach((value, i) => {
    text += markupOf(value) + (strings[i + 1] ?? '');
  });
  return new Markup(text);
}

function markupOf(value: Interpolation): string {
  if (value instanceof Markup) return value.text;
  if (Array.isArray(value)) return value.map((item: Markup) => item.text).join('');
  return escapeHtml(String(value));
}

/** For this module's own constants only (the style sheet), never for input. */
function raw(text: string): Markup {
  return new Markup(text);
}

const ENTITIES: Readonly<Record<string, string>> = {
  '&': '&amp;',
  '<': '&lt;',
  '>': '&gt;',
  '"': '&quot;',
  "'": '&#39;',
};

/**
 * Safe in text and in quoted attributes alike. Control characters (other than tab and line breaks) are not allowed
 * in HTML and lone surrogates are not text: both become U+FFFD, as a decoder would show them.
 */
function escapeHtml(text: string): string {
  return text
    .replace(/[&<>"']/g, (char) => ENTITIES[char] ?? char)
    .replace(/[\p{Cc}\p{Cs}]/gu, (char) => (char === '\t' || char === '\n' || char === '\r' ? char : '\uFFFD'));
}

function generatedAt(date: Date): Markup {
  const time = date instanceof Date ? date.getTime() : Number.NaN;
  if (!Number.isFinite(time)) return html`at an unknown time`;
  const iso = new Date(time).toISOString();
  return html`<time datetime="${iso}">${iso.replace('T', ' ').replace(/\.\d+Z$/, ' UTC')}</time>`;
}

// ---------------------------------------------------------------------------------------------------------------
// Tables.

function tableSection(table: ScenarioTable): Markup {
  const heading = html`<h2>${formatCell(table.id)}. ${formatCell(table.title)}</h2>`;
  if (table.skipped !== undefined) {
    return html`<section class="scenario">
${heading}
<p class="skipped">skipped: ${formatCell(table.skipped)}</p>
</section>
`;
  }
  const note = table.note === undefined ? html`` : html`<p class="note">${formatCell(table.note)}</p>`;
  return html`<section class="scenario">
${heading}
${columnCount(table) === 0 ? html`<p>(no columns)</p>` : tableElement(table)}
${note}
</section>
`;
}

function tableElement(table: ScenarioTable): Markup {
  const count = columnCount(table);
  const numeric = numericColumns(table);
  const columns = Array.isArray(table.columns) ? table.columns : [];
  const cell = (tag: 'th' | 'td', value: unknown, i: number) => {
    const classes = [numeric[i] === true ? 'num' : '', value === null ? 'missing' : ''].filter(Boolean).join(' ');
    const open = classes === '' ? html`<${raw(tag)}>` : html`<${raw(tag)} class="${classes}">`;
    return html`${open}${formatCell(value)}</${raw(tag)}>`;
  };
  const header = Array.from({ length: count }, (_, i) => cell('th', columns[i] ?? '', i));
  const rows = (Array.isArray(table.rows) ? table.rows : []).filter((row) => Array.isArray(row));
  const body = rows.map(
    (row) => html`<tr>${Array.from({ length: count }, (_, i) => cell('td', i < row.length ? row[i] : '', i))}</tr>
`,
  );
  return html`<table>
<thead><tr>${header}</tr></thead>
<tbody>
${body}</tbody>
</table>`;
}

// ---------------------------------------------------------------------------------------------------------------
// The waterfall, as SVG.

/** Geometry in SVG user units; the SVG scales to the page's width. */
const SVG = {
  width: 1320,
  labelWidth: 300,
  numbersWidth: 520,
  gap: 12,
  axisHeight: 30,
  rowHeight: 22,
  indent: 14,
  /** Width of a character of the 11px monospace font, to cut labels before they overflow their column. */
  charWidth: 6.7,
} as const;

const BAR_X = SVG.labelWidth;
const BAR_WIDTH = SVG.width - SVG.labelWidth - SVG.numbersWidth - SVG.gap;

function waterfallSection(spans: readonly WaterfallSpan[], traceId: string | undefined): Markup {
  const heading =
    traceId === undefined ? html`<h2>Waterfall</h2>` : html`<h2>Waterfall of trace <code>${traceId}</code></h2>`;
  if (spans.length === 0) {
    return html`<section class="waterfall">
${heading}
<p>No request, call or task of this trace was found in the logs.</p>
</section>
`;
  }
  return html`<section class="waterfall">
${heading}
${legend()}
${waterfallSvg(spans)}
</section>
`;
}

function legend(): Markup {
  const outcomes = (['ok', 'deadline_exceeded', 'cancelled', 'error'] as const).map(
    (outcome) => html`<li><span class="swatch ${outcomeTone(outcome)}"></span>${outcome}</li>`,
  );
  return html`<ul class="legend">${outcomes}<li><span class="swatch shape request"></span>request</li><li><span class="swatch shape call"></span>outgoing call</li><li><span class="swatch shape task"></span>detached task</li></ul>`;
}

interface Scale {
  origin: number;
  totalMs: number;
}

function waterfallSvg(spans: readonly WaterfallSpan[]): Markup {
  const scale = scaleOf(spans);
  const height = SVG.axisHeight + spans.length * SVG.rowHeight + 8;
  return html`<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 ${SVG.width} ${height}" role="img" aria-label="Waterfall: one bar per request, call and task, on a shared time axis">
${axis(scale, height)}
${spans.map((span, row) => spanRow(span, row, scale))}</svg>`;
}

function scaleOf(spans: readonly WaterfallSpan[]): Scale {
  let origin = 0;
  let end = 0;
  for (const span of spans) {
    origin = Math.min(origin, finiteOr(span.startMs));
    end = Math.max(end, finiteOr(span.endMs));
  }
  // All spans of zero length still need an axis: 1 ms wide.
  return { origin, totalMs: end - origin > 0 ? end - origin : 1 };
}

function x(ms: number, scale: Scale): number {
  return BAR_X + ((finiteOr(ms) - scale.origin) / scale.totalMs) * BAR_WIDTH;
}

function finiteOr(value: number): number {
  return Number.isFinite(value) ? value : 0;
}

/** Gridlines at round numbers of ms (1, 2 or 5 times a power of ten), about six of them. */
function axis(scale: Scale, height: number): Markup {
  const step = niceStep(scale.totalMs / 6);
  const ticks: Markup[] = [];
  for (let ms = 0, i = 0; ms <= scale.origin + scale.totalMs + 1e-9 && i < 50; i++, ms = i * step) {
    const at = units(x(ms, scale));
    ticks.push(html`<line x1="${at}" y1="${SVG.axisHeight - 6}" x2="${at}" y2="${height}"/><text x="${at}" y="${SVG.axisHeight - 10}" text-anchor="middle">${round(ms)}</text>
`);
  }
  return html`<g class="axis">
<text x="${BAR_X - SVG.gap}" y="${SVG.axisHeight - 10}" text-anchor="end">ms</text>
${ticks}</g>`;
}

function niceStep(rough: number): number {
  if (!(rough > 0) || !Number.isFinite(rough)) return 1;
  const power = 10 ** Math.floor(Math.log10(rough));
  const mantissa = rough / power;
  return (mantissa <= 1 ? 1 : mantissa <= 2 ? 2 : mantissa <= 5 ? 5 : 10) * power;
}

/** Requests are tall bars, calls thin ones, detached tasks dashed: the shape says what, the colour how it ended. */
function spanRow(span: WaterfallSpan, row: number, scale: Scale): Markup {
  const { what, numbers } = describeSpan(span, true);
  const top = SVG.axisHeight + row * SVG.rowHeight;
  const barHeight = span.kind === 'request' ? 14 : 9;
  const start = x(span.startMs, scale);
  const width = Math.max(1, x(span.endMs, scale) - start);
  const depth = Math.max(0, Math.min(20, Math.floor(finiteOr(span.depth))));
  const labelX = 6 + depth * SVG.indent;
  const text = top + SVG.rowHeight / 2 + 4;
  const tooltip = `${what}\n${numbers}\n${round(span.startMs)} → ${round(span.endMs)} ms`;
  return html`<g class="span ${span.kind} ${outcomeTone(span.outcome)}"><title>${tooltip}</title><rect class="bar" x="${units(start)}" y="${units(top + (SVG.rowHeight - barHeight) / 2)}" width="${units(width)}" height="${barHeight}" rx="2"/><text x="${labelX}" y="${text}">${cut(what, (SVG.labelWidth - SVG.gap - labelX) / SVG.charWidth)}</text><text class="numbers" x="${SVG.width - SVG.numbersWidth + SVG.gap}" y="${text}">${cut(numbers, (SVG.numbersWidth - SVG.gap) / SVG.charWidth)}</text></g>
`;
}

/** Cut to `max` characters (code points, so no surrogate pair is split); the tooltip keeps the whole text. */
function cut(text: string, max: number): string {
  const chars = Array.from(text);
  const room = Math.max(1, Math.floor(max));
  return chars.length <= room ? text : `${chars.slice(0, room - 1).join('')}…`;
}

function units(value: number): string {
  return String(Math.round(value * 10) / 10);
}

function round(ms: number): string {
  const value = finiteOr(ms);
  return Math.abs(value) < 10 ? String(Math.round(value * 10) / 10) : String(Math.round(value));
}

const STYLE = `
:root { color-scheme: light dark; --ok: #2e7d32; --deadline: #c62828; --cancelled: #ef6c00; --error: #8e24aa; --other: #78909c; }
body { font: 15px/1.5 system-ui, sans-serif; max-width: 1360px; margin: 2rem auto; padding: 0 1rem; }
h1 { margin-bottom: 0; }
.meta { color: GrayText; margin-top: .25rem; }
section { margin: 2rem 0; }
table { border-collapse: collapse; }
th, td { border: 1px solid color-mix(in srgb, currentColor 25%, transparent); padding: .3rem .7rem; text-align: left; }
th { background: color-mix(in srgb, currentColor 7%, transparent); }
.num { text-align: right; font-variant-numeric: tabular-nums; }
.missing { color: GrayText; }
.note { white-space: pre-line; max-width: 75ch; }
.skipped { font-style: italic; }
svg { width: 100%; height: auto; font: 11px ui-monospace, SFMono-Regular, Menlo, monospace; }
svg text { fill: currentColor; }
.axis line { stroke: color-mix(in srgb, currentColor 20%, transparent); }
.axis text { fill: GrayText; }
.bar { fill: var(--other); }
.ok .bar { fill: var(--ok); } .deadline .bar { fill: var(--deadline); }
.cancelled .bar { fill: var(--cancelled); } .error .bar { fill: var(--error); }
.task .bar { fill-opacity: .45; stroke: currentColor; stroke-dasharray: 3 2; }
.span:hover { font-weight: bold; }
.legend { list-style: none; padding: 0; display: flex; flex-wrap: wrap; gap: .4rem 1.2rem; font-size: .9em; }
.swatch { display: inline-block; width: 1.4em; height: .8em; margin-right: .4em; border-radius: 2px; vertical-align: middle; background: var(--other); }
.swatch.ok { background: var(--ok); } .swatch.deadline { background: var(--deadline); }
.swatch.cancelled { background: var(--cancelled); } .swatch.error { background: var(--error); }
.swatch.call { height: .5em; } .swatch.task { opacity: .45; border: 1px dashed currentColor; }
`;
