/**
 * One trace's waterfall, rebuilt from the services' pino lines alone: each hop's end-of-request line
 * (`@deadline/server`), each outgoing call's line (`logCalls` of `@deadline/pino`) and each detached task's line
 * (`@deadline/jobs`). A line is written when its work ends, so `time` is the end and `time - elapsedMs` the start.
 * No line names its parent span, so nesting is inferred from where each span starts (and, between hops, the
 * target).
 */

type Line = Readonly<Record<string, unknown>>;

/** What every span has. Times are in ms from the earliest start in the trace. */
interface SpanBase {
  /** The service that wrote the line (absent when its logger had no deadline mixin). */
  hop: string | undefined;
  /** Request: `METHOD path`; call: its target; task: its name. */
  label: string;
  startMs: number;
  endMs: number;
  elapsedMs: number;
  /** As logged: `ok`, `deadline_exceeded`, `cancelled`, `error` (tasks: `deadline` for their own budget). */
  outcome: string;
  /** 0 for a root; one more than the span it nests under. */
  depth: number;
}

interface RequestSpan extends SpanBase {
  kind: 'request';
  /** The budget the request arrived with (or got by default). */
  budgetMs: number | undefined;
  statusCode: number | undefined;
  /** The hop whose deadline fired. */
  exceededBy: string | undefined;
}

interface CallSpan extends SpanBase {
  kind: 'call';
  target: string;
  /** Time the request had left before the call. */
  remainingMs: number | undefined;
  timeoutMs: number | undefined;
  statusCode: number | undefined;
  /** `before-call` (refused, never sent) or `during-call` (cut off), when a deadline stopped it. */
  phase: string | undefined;
}

interface TaskSpan extends SpanBase {
  kind: 'task';
  /** The task's own budget, if it was given one. */
  budgetMs: number | undefined;
}

/** One bar of the waterfall: a hop's request, an outgoing call, or a detached task. */
export type WaterfallSpan = RequestSpan | CallSpan | TaskSpan;

/** A span before nesting, on the absolute (epoch ms) clock. */
interface Draft {
  span: WaterfallSpan;
  start: number;
  end: number;
  /** The request path, to tell which call a request answers. */
  path: string | undefined;
  /** Written inside work detached from its request (its calls nest under the task, not the request). */
  detached: boolean;
}

/**
 * How far before its parent a child may seem to start (or after it ended). `time` is whole ms while `elapsedMs` comes from the
 * monotonic clock, so a start computed as `time - elapsedMs` is off by up to a ms, more when the event loop was
 * late writing the line: a few ms of slack, or real children would be orphaned.
 */
const TOLERANCE_MS = 5;

const TASK_MESSAGES = new Set(['background task done', 'background task failed']);

/** The spans of one trace, nested (`depth`) and in drawing order: parents first, siblings by start. */
export function waterfallFor(lines: readonly Record<string, unknown>[], traceId: string): WaterfallSpan[] {
  return layout(draftsOf(lines, traceId));
}

/**
 * The trace most worth drawing: the one, among traces with a request line, with the most spans (ties: the one
 * that started first). `undefined` when no request line could be placed.
 */
export function pickTrace(lines: readonly Record<string, unknown>[]): string | undefined {
  let best: { traceId: string; count: number; start: number } | undefined;
  for (const [traceId, ofTrace] of groupByTrace(lines)) {
    const drafts = draftsOf(ofTrace, traceId);
    if (!drafts.some((draft) => draft.span.kind === 'request')) continue;
    const start = least(drafts.map((draft) => draft.start));
    if (best === undefined || drafts.length > best.count || (drafts.length === best.count && start < best.start)) {
      best = { traceId, count: drafts.length, start };
    }
  }
  return best?.traceId;
}

function groupByTrace(lines: readonly unknown[]): Map<string, unknown[]> {
  const groups = new Map<string, unknown[]>();
  for (const line of asArray(lines)) {
    const traceId = field(line, 'traceId');
    if (typeof traceId !== 'string') continue;
    const group = groups.get(traceId);
    if (group === undefined) groups.set(traceId, [line]);
    else group.push(line);
  }
  return groups;
}

function draftsOf(lines: readonly unknown[], traceId: string): Draft[] {
  const drafts: Draft[] = [];
  for (const line of asArray(lines)) {
    try {
      const draft = draftOf(line, traceId);
      if (draft !== undefined) drafts.push(draft);
    } catch {
      // A line whose fields throw when read (a getter, a proxy) is garbage like any other: skipped.
    }
  }
  return drafts;
}

/** Lines come from parsing untrusted text: even the array is checked rather than trusted. */
function asArray(lines: readonly unknown[]): readonly unknown[] {
  return Array.isArray(lines) ? lines : [];
}

function field(line: unknown, key: string): unknown {
  if (typeof line !== 'object' || line === null) return undefined;
  try {
    return (line as Line)[key];
  } catch {
    return undefined;
  }
}

function draftOf(value: unknown, traceId: string): Draft | undefined {
  if (typeof value !== 'object' || value === null) return undefined;
  const line = value as Line;
  if (line.traceId !== traceId) return undefined;
  const kind = kindOf(line);
  const end = timeOf(line.time);
  const elapsed = elapsedOf(line.elapsedMs);
  if (kind === undefined || end === undefined || elapsed === undefined) return undefined;
  const start = end - elapsed;
  const base = {
    hop: text(line.hop),
    startMs: start,
    endMs: end,
    elapsedMs: elapsed,
    outcome: text(line.outcome) ?? '',
    depth: 0,
  };
  const detached = line.detached === true;
  if (kind === 'request') {
    const span: RequestSpan = {
      ...base,
      kind,
      label: `${line.method} ${line.path}`,
      budgetMs: finite(line.budgetMs),
      statusCode: finite(line.statusCode),
      exceededBy: text(line.exceededBy),
    };
    return { span, start, end, path: text(line.path), detached };
  }
  if (kind === 'call') {
    const target = String(line.target);
    const span: CallSpan = {
      ...base,
      kind,
      label: target,
      target,
      remainingMs: finite(line.remainingMs),
      timeoutMs: finite(line.timeoutMs),
      statusCode: finite(line.statusCode),
      phase: text(line.phase),
    };
    return { span, start, end, path: undefined, detached };
  }
  const span: TaskSpan = { ...base, kind, label: String(line.task), budgetMs: finite(line.budgetMs) };
  return { span, start, end, path: undefined, detached };
}

/**
 * Which of the three lines this is. The message is checked when present (other lines may carry a `target` or a
 * `path` of their own); without one (a logger whose message key is not `msg`), the fields alone decide.
 */
function kindOf(line: Line): WaterfallSpan['kind'] | undefined {
  const msg = line.msg;
  const outcome = text(line.outcome);
  if (outcome === undefined) return undefined;
  if (typeof line.target === 'string' && (msg === undefined || msg === `deadline: call ${outcome}`)) return 'call';
  if (typeof line.method === 'string' && typeof line.path === 'string') {
    if (msg === undefined || msg === `deadline: ${outcome}`) return 'request';
  }
  if (typeof line.task === 'string') {
    if (typeof msg === 'string' ? TASK_MESSAGES.has(msg) : line.detached === true) return 'task';
  }
  return undefined;
}

/** pino's `time`: epoch ms by default; an ISO string with `stdTimeFunctions.isoTime`. */
function timeOf(value: unknown): number | undefined {
  if (typeof value === 'string') return finite(Date.parse(value));
  return finite(value);
}

/** A call refused before it was made has no `elapsedMs`: it took no time. A negative or non-number one is junk. */
function elapsedOf(value: unknown): number | undefined {
  if (value === undefined) return 0;
  const elapsed = finite(value);
  return elapsed !== undefined && elapsed >= 0 ? elapsed : undefined;
}

/** `Math.min(...values)` throws past ~100k arguments; a big log must not. */
function least(values: readonly number[]): number {
  return values.reduce((min, value) => Math.min(min, value), Number.POSITIVE_INFINITY);
}

function greatest(values: readonly number[]): number {
  return values.reduce((max, value) => Math.max(max, value), Number.NEGATIVE_INFINITY);
}

function finite(value: unknown): number | undefined {
  return typeof value === 'number' && Number.isFinite(value) ? value : undefined;
}

function text(value: unknown): string | undefined {
  return typeof value === 'string' ? value : undefined;
}

/** Nests the drafts, then lists them depth-first so that a parent always comes before its children. */
function layout(drafts: Draft[]): WaterfallSpan[] {
  if (drafts.length === 0) return [];
  const parent = parentsOf(drafts);
  breakCycles(drafts, parent);
  const origin = least(drafts.map((draft) => draft.start));
  const spans: WaterfallSpan[] = [];
  for (const { index, depth } of depthFirst(drafts, parent)) {
    const draft = drafts[index] as Draft;
    spans.push({ ...draft.span, startMs: draft.start - origin, endMs: draft.end - origin, depth });
  }
  return spans;
}

/**
 * A child is placed by where it starts, not where it ends: a span starts inside its parent, but often outlives it
 * (the downstream request still running when its caller was cut off at its timeout, a query being cancelled
 * after the response went out — the very dead work the demo measures), so containment of the whole span would
 * orphan exactly the spans worth seeing.
 */
function parentsOf(drafts: Draft[]): (number | undefined)[] {
  const parent: (number | undefined)[] = drafts.map(() => undefined);
  const indices = (kind: WaterfallSpan['kind']) => drafts.flatMap((draft, i) => (draft.span.kind === kind ? [i] : []));
  const requests = indices('request');
  const calls = indices('call');
  const tasks = indices('task');
  nestRequestsUnderCalls(drafts, requests, calls, parent);
  for (const call of calls) parent[call] = containerOfCall(drafts, call, [...requests, ...tasks]);
  for (const task of tasks) parent[task] = containerOfTask(drafts, task, requests);
  return parent;
}

/**
 * A request of hop B answers a call made by another hop, that was under way when the request started. One call is
 * answered by one request, so each call is taken once; among candidates, one whose target names the request's
 * path (or hop) wins, then the one made last before the request arrived.
 */
function nestRequestsUnderCalls(drafts: Draft[], requests: number[], calls: number[], parent: (number | undefined)[]) {
  const taken = new Set<number>();
  for (const request of [...requests].sort((a, b) => byStart(drafts, a, b))) {
    const inner = drafts[request] as Draft;
    const candidates = calls.filter((call) => {
      const outer = drafts[call] as Draft;
      const span = outer.span as CallSpan;
      // A refused call sent nothing, so no request answers it.
      return !taken.has(call) && span.hop !== inner.span.hop && span.phase !== 'before-call' && startsIn(outer, inner);
    });
    const best = closest(drafts, inner, candidates, (call) => -answers(drafts[call] as Draft, inner));
    if (best === undefined) continue;
    parent[request] = best;
    taken.add(best);
  }
}

/** 2: the call's URL has the request's path; 1: its target names the request's hop; 0: only time says so. */
function answers(call: Draft, request: Draft): number {
  const target = call.span.label;
  const url = target.slice(target.indexOf(' ') + 1);
  try {
    if (request.path !== undefined && new URL(url).pathname === request.path) return 2;
  } catch {
    // Not a URL (a database call, a custom target name): fall back to the hop's name.
  }
  const hop = request.span.hop;
  return hop !== undefined && hop !== '' && target.includes(hop) ? 1 : 0;
}

/**
 * A call nests under the request of its hop that was running when it started (for a call made in detached work,
 * the task, when its line was logged).
 */
function containerOfCall(drafts: Draft[], call: number, containers: number[]): number | undefined {
  const inner = drafts[call] as Draft;
  const candidates = containers.filter(
    (i) => sameHop(drafts[i] as Draft, inner) && startsIn(drafts[i] as Draft, inner),
  );
  return closest(drafts, inner, candidates, (i) =>
    ((drafts[i] as Draft).span.kind === 'task') === inner.detached ? 0 : 1,
  );
}

/** A task nests under the request of its hop that started it (its `elapsedMs` counts from the `run()` call). */
function containerOfTask(drafts: Draft[], task: number, requests: number[]): number | undefined {
  const inner = drafts[task] as Draft;
  const candidates = requests.filter((i) => sameHop(drafts[i] as Draft, inner) && startsIn(drafts[i] as Draft, inner));
  return closest(drafts, inner, candidates, () => 0);
}

function sameHop(outer: Draft, inner: Draft): boolean {
  return inner.span.hop === undefined || outer.span.hop === inner.span.hop;
}

function startsIn(outer: Draft, inner: Draft): boolean {
  return inner.start >= outer.start - TOLERANCE_MS && inner.start <= outer.end + TOLERANCE_MS;
}

/**
 * The candidate with the lowest rank, then the one that started closest to `inner` (of nested containers, the
 * innermost; of a retry's successive attempts, the one running then), then the first.
 */
function closest(drafts: Draft[], inner: Draft, candidates: number[], rank: (i: number) => number): number | undefined {
  let best: number | undefined;
  let bestKey: [number, number] = [0, 0];
  for (const i of candidates) {
    const key: [number, number] = [rank(i), Math.abs(inner.start - (drafts[i] as Draft).start)];
    if (best === undefined || key[0] < bestKey[0] || (key[0] === bestKey[0] && key[1] < bestKey[1])) {
      best = i;
      bestKey = key;
    }
  }
  return best;
}

/**
 * Spans that start within {@link TOLERANCE_MS} of each other can each start inside the other, and garbage lines
 * can chain into a loop. In each cycle the weakest link is cut: the child that starts furthest before its parent
 * (a root request attached to a call its own chain made a moment later). Then every span is reached from a root.
 */
function breakCycles(drafts: Draft[], parent: (number | undefined)[]): void {
  const lead = (child: number) => (drafts[parent[child] as number] as Draft).start - (drafts[child] as Draft).start;
  for (let i = 0; i < parent.length; i++) {
    const path: number[] = [];
    const seen = new Set<number>();
    let node: number | undefined = i;
    for (; node !== undefined && !seen.has(node); node = parent[node]) {
      seen.add(node);
      path.push(node);
    }
    // Each span has one parent, so the walk from `i` meets at most one cycle: once cut, the walk ends at a root.
    if (node === undefined) continue;
    const cycle = path.slice(path.indexOf(node));
    parent[cycle.reduce((weakest, child) => (lead(child) > lead(weakest) ? child : weakest))] = undefined;
  }
}

/** Iterative: a long chain of garbage spans must not overflow the stack. */
function depthFirst(drafts: Draft[], parent: (number | undefined)[]): { index: number; depth: number }[] {
  const children = new Map<number | undefined, number[]>();
  parent.forEach((up, i) => {
    const siblings = children.get(up);
    if (siblings === undefined) children.set(up, [i]);
    else siblings.push(i);
  });
  const ordered = (up: number | undefined) => [...(children.get(up) ?? [])].sort((a, b) => byStart(drafts, a, b));
  const order: { index: number; depth: number }[] = [];
  const stack = ordered(undefined)
    .reverse()
    .map((index) => ({ index, depth: 0 }));
  for (let next = stack.pop(); next !== undefined; next = stack.pop()) {
    order.push(next);
    const depth = next.depth + 1;
    for (const child of ordered(next.index).reverse()) stack.push({ index: child, depth });
  }
  return order;
}

/** By start; at equal starts the longer first (it is the likelier container), then as logged. */
function byStart(drafts: Draft[], a: number, b: number): number {
  const x = drafts[a] as Draft;
  const y = drafts[b] as Draft;
  return x.start - y.start || y.end - x.end || a - b;
}

// ---------------------------------------------------------------------------------------------------------------
// Describing a span: shared by the terminal drawing and the HTML report.

/** How an outcome is coloured: a deadline, a cancellation and an error are each a way of ending badly. */
export type OutcomeTone = 'ok' | 'deadline' | 'cancelled' | 'error' | 'other';

/** The colour family of an outcome as logged (an unknown one is `other`, drawn grey or uncoloured). */
export function outcomeTone(outcome: string): OutcomeTone {
  switch (outcome) {
    case 'ok':
      return 'ok';
    case 'deadline_exceeded':
    case 'deadline':
      return 'deadline';
    case 'cancelled':
      return 'cancelled';
    case 'error':
      return 'error';
    default:
      return 'other';
  }
}

/**
 * A span in words: `what` (hop and label) and its numbers, e.g. `budget 800 → 612 ms, 504 deadline_exceeded (by
 * inventory)` or `left 742 · timeout 722 · took 31 ms · ok`. Not escaped nor sanitised: callers do that for
 * their medium.
 */
export function describeSpan(span: WaterfallSpan, unicode: boolean): { what: string; numbers: string } {
  const glyphs = unicode ? UNICODE : ASCII;
  return { what: whatOf(span, glyphs), numbers: numbersOf(span, glyphs, true) };
}

function whatOf(span: WaterfallSpan, glyphs: Glyphs): string {
  const hop = span.hop ?? '?';
  if (span.kind === 'request') return `${hop} ${span.label}`;
  if (span.kind === 'call') return `${hop} ${glyphs.arrow} ${span.label}`;
  return `${hop} task ${span.label}`;
}

/** Without `detail`, a call's phase is left out: what goes first when a row is short of room. */
function numbersOf(span: WaterfallSpan, glyphs: Glyphs, detail: boolean): string {
  if (span.kind === 'request') return requestNumbers(span, glyphs);
  if (span.kind === 'call') return callNumbers(span, glyphs, detail);
  return taskNumbers(span, glyphs);
}

function requestNumbers(span: RequestSpan, glyphs: Glyphs): string {
  const took = `${ms(span.elapsedMs)} ms`;
  const time =
    span.budgetMs === undefined ? `took ${took}` : `budget ${ms(span.budgetMs)}${glyphs.separator}took ${took}`;
  const status = span.statusCode === undefined ? '' : `${span.statusCode} `;
  const by = span.exceededBy === undefined ? '' : ` (by ${span.exceededBy})`;
  return `${time}, ${status}${span.outcome}${by}`;
}

function callNumbers(span: CallSpan, glyphs: Glyphs, detail: boolean): string {
  const parts: string[] = [];
  if (span.remainingMs !== undefined) parts.push(`left ${ms(span.remainingMs)}`);
  if (span.timeoutMs !== undefined) parts.push(`timeout ${ms(span.timeoutMs)}`);
  // A refused call was never sent: "took 0 ms" would suggest it was.
  if (span.phase !== 'before-call') parts.push(`took ${ms(span.elapsedMs)} ms`);
  parts.push(span.phase === undefined || !detail ? span.outcome : `${span.outcome} (${span.phase})`);
  return parts.join(glyphs.separator);
}

function taskNumbers(span: TaskSpan, glyphs: Glyphs): string {
  const parts: string[] = [];
  if (span.budgetMs !== undefined) parts.push(`budget ${ms(span.budgetMs)}`);
  parts.push(`took ${ms(span.elapsedMs)} ms`, span.outcome);
  return parts.join(glyphs.separator);
}

/** Whole ms, except below 10 ms where the tenth the logs carry still means something. */
function ms(value: number): string {
  if (!Number.isFinite(value)) return String(value);
  return Math.abs(value) < 10 ? String(Math.round(value * 10) / 10) : String(Math.round(value));
}

// ---------------------------------------------------------------------------------------------------------------
// The terminal drawing.

/**
 * Options of {@link renderWaterfallText}.
 *
 * @example
 * ```ts
 * console.log(renderWaterfallText(spans, { width: process.stdout.columns, color: process.stdout.isTTY }));
 * ```
 */
export interface WaterfallTextOptions {
  /** Columns the drawing may use, default 100 (at most 1000). */
  width?: number | undefined;
  /** ANSI colours: red for spans that ended badly, green for ok ones. Default false. */
  color?: boolean | undefined;
  /** Block bars, box-drawing axis and arrows instead of ASCII. Default false. */
  unicode?: boolean | undefined;
}

interface Glyphs {
  bar: string;
  axis: string;
  arrow: string;
  separator: string;
  ellipsis: string;
}

const ASCII: Glyphs = { bar: '#', axis: '-', arrow: '->', separator: ', ', ellipsis: '...' };
const UNICODE: Glyphs = { bar: '█', axis: '─', arrow: '→', separator: ' · ', ellipsis: '…' };

/** Share of the width the labels may take; the rest is the time axis. */
const LABEL_SHARE = 0.3;
/** A width beyond any terminal: a garbage width must not allocate without bound. */
const MAX_WIDTH = 1000;

type Colour = 'green' | 'red' | undefined;

/** One terminal column: one code point, and the colour it is drawn in. */
interface Cell {
  char: string;
  colour: Colour;
}

/**
 * The spans as a terminal drawing: a time axis (0 … total ms), then one row per span, its label indented by depth,
 * its bar on the shared axis, its numbers beside the bar (or inside it when neither side has room). Every line
 * fits in `width` columns; text from the logs is sanitised (no control characters; ASCII unless `unicode`).
 */
export function renderWaterfallText(spans: readonly WaterfallSpan[], options: WaterfallTextOptions = {}): string {
  const width = widthOf(options.width);
  const unicode = options.unicode === true;
  const glyphs = unicode ? UNICODE : ASCII;
  const rows = spans.map((span) => {
    const indent = '  '.repeat(Math.max(0, Math.min(finiteOr(span.depth, 0), width)));
    const numbers = [true, false].map((detail) => chars(terminalText(numbersOf(span, glyphs, detail), unicode)));
    return { span, label: chars(terminalText(indent + whatOf(span, glyphs), unicode)), numbers };
  });
  if (rows.length === 0) return '(no spans)'.slice(0, width);
  const labelWidth = Math.min(greatest(rows.map((row) => row.label.length)), Math.max(1, width * LABEL_SHARE) | 0);
  const axisWidth = Math.max(0, width - labelWidth - 1);
  const axis = timeAxis(spans);
  const lines = [
    [...plain(' '.repeat(labelWidth + 1)), ...axisCells(axis, axisWidth, glyphs)],
    ...rows.map((row) => [
      ...plain(
        fit(row.label, labelWidth, glyphs)
          .join('')
          .padEnd(labelWidth + 1),
      ),
      ...barCells(row.span, row.numbers, axis, axisWidth, glyphs),
    ]),
  ];
  return lines.map((cells) => draw(cells.slice(0, width), options.color === true)).join('\n');
}

function widthOf(width: number | undefined): number {
  return typeof width === 'number' && width >= 1 ? Math.floor(Math.min(width, MAX_WIDTH)) : 100;
}

/** Log text is untrusted: control and format characters could move the cursor or recolour the terminal. */
function terminalText(value: string, unicode: boolean): string {
  const safe = value.replace(/[\p{Cc}\p{Cf}\p{Cs}]/gu, '?');
  return unicode ? safe : safe.replace(/[^\x20-\x7e]/gu, '?');
}

/** Code points, so that a character outside the BMP is one column, not two. */
function chars(value: string): string[] {
  return Array.from(value);
}

function plain(value: string): Cell[] {
  return chars(value).map((char) => ({ char, colour: undefined }));
}

function fit(text: string[], width: number, glyphs: Glyphs): string[] {
  if (text.length <= width) return text;
  const ellipsis = chars(glyphs.ellipsis);
  if (width <= ellipsis.length) return text.slice(0, width);
  return [...text.slice(0, width - ellipsis.length), ...ellipsis];
}

interface Axis {
  origin: number;
  totalMs: number;
}

/** From the earliest start (0 for spans from {@link waterfallFor}) to the latest end. */
function timeAxis(spans: readonly WaterfallSpan[]): Axis {
  const origin = least([0, ...spans.map((span) => finiteOr(span.startMs, 0))]);
  const end = greatest([origin, ...spans.map((span) => finiteOr(span.endMs, 0))]);
  return { origin, totalMs: end - origin };
}

function finiteOr(value: number, fallback: number): number {
  return Number.isFinite(value) ? value : fallback;
}

/** `0 ─────── 306 ─────── 612 ms`: both ends, and the middle when there is room for it. */
function axisCells(axis: Axis, width: number, glyphs: Glyphs): Cell[] {
  const cells = plain(glyphs.axis.repeat(width));
  const end = chars(`${ms(axis.origin + axis.totalMs)} ms`);
  const middle = chars(ms(axis.origin + axis.totalMs / 2));
  const middleAt = Math.round(width / 2 - middle.length / 2);
  write(cells, chars(ms(axis.origin)), 0, undefined);
  if (middleAt > 2 && middleAt + middle.length < width - end.length - 2) write(cells, middle, middleAt, undefined);
  write(cells, end.slice(-width), Math.max(0, width - end.length), undefined);
  return cells;
}

/**
 * The bar at its place on the axis, its numbers beside it: right, else left, else inside; the shorter numbers if
 * the full ones fit nowhere; cut to fit the largest room as a last resort.
 */
function barCells(span: WaterfallSpan, numbers: string[][], axis: Axis, width: number, glyphs: Glyphs): Cell[] {
  const cells = plain(' '.repeat(width));
  if (width === 0) return cells;
  const colour = colourOf(span.outcome);
  const x = (ms: number) => (axis.totalMs > 0 ? ((finiteOr(ms, 0) - axis.origin) / axis.totalMs) * width : 0);
  const start = Math.min(width - 1, Math.max(0, Math.floor(x(span.startMs))));
  const end = Math.min(width, Math.max(start + 1, Math.round(x(span.endMs))));
  write(cells, chars(glyphs.bar.repeat(end - start)), start, colour);
  // Inside, the bar keeps a cell at each end to show its extent; the text is set off by blanks when there is room.
  const rooms: Room[] = [
    { size: width - end - 1, at: () => end + 1, pad: true },
    { size: start - 1, at: (length) => start - 1 - length, pad: true },
    { size: end - start - 4, at: () => start + 2, pad: true },
    { size: end - start - 2, at: () => start + 1, pad: false },
  ];
  for (const text of numbers) {
    const room = rooms.find(({ size }) => text.length <= size);
    if (room === undefined) continue;
    writeIn(cells, room, text, colour);
    return cells;
  }
  const largest = rooms.reduce((a, b) => (b.size > a.size ? b : a));
  if (largest.size > 0) writeIn(cells, largest, fit(numbers[numbers.length - 1] ?? [], largest.size, glyphs), colour);
  return cells;
}

interface Room {
  size: number;
  /** Where text of this length starts. */
  at: (length: number) => number;
  /** Whether to blank the cell either side, so that the text stands apart from the bar. */
  pad: boolean;
}

function writeIn(cells: Cell[], room: Room, text: string[], colour: Colour): void {
  const at = room.at(text.length);
  if (room.pad) {
    write(cells, [' '], at - 1, undefined);
    write(cells, [' '], at + text.length, undefined);
  }
  write(cells, text, at, colour);
}

function write(cells: Cell[], text: string[], at: number, colour: Colour): void {
  text.forEach((char, i) => {
    if (at + i >= 0 && at + i < cells.length) cells[at + i] = { char, colour };
  });
}

function colourOf(outcome: string): Colour {
  const tone = outcomeTone(outcome);
  return tone === 'ok' ? 'green' : tone === 'other' ? undefined : 'red';
}

const ANSI = { green: '\x1b[32m', red: '\x1b[31m', reset: '\x1b[0m' } as const;

/** Cells to text, one escape sequence per run of a colour; trailing blanks dropped. */
function draw(cells: Cell[], colour: boolean): string {
  let line = '';
  let current: Colour;
  for (const cell of cells) {
    if (colour && cell.colour !== current) {
      if (current !== undefined) line += ANSI.reset;
      if (cell.colour !== undefined) line += ANSI[cell.colour];
      current = cell.colour;
    }
    line += cell.char;
  }
  if (colour && current !== undefined) line += ANSI.reset;
  return colour ? line.replace(/ +$/, '') : line.trimEnd();
}
