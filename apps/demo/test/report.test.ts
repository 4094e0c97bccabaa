import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { renderHtmlReport } from '../src/report/html.ts';
import { renderTableText, type ScenarioTable } from '../src/report/table.ts';
import { pickTrace, renderWaterfallText, type WaterfallSpan, waterfallFor } from '../src/report/waterfall.ts';

type Line = Record<string, unknown>;

/** Epoch ms of the trace's first arrival; `time` in the lines is this plus whole ms, as pino writes it. */
const T0 = 1_750_000_000_000;
const TRACE = '4bf92f3577b34da6a3ce929d0e0e4736';
const OTHER = '0af7651916cd43dd8448eb211c80319c';

/**
 * A checkout at the gateway with 800 ms, through orders (a Postgres query, then inventory) to inventory, whose
 * own deadline fires first (each hop keeps a margin); the 504 travels back up. Orders then releases the stock in
 * a detached task with a budget of its own. In the order the lines are written: each when its work ends.
 */
const checkout: Line[] = [
  {
    level: 30,
    time: T0 + 38,
    traceId: TRACE,
    hop: 'orders',
    budgetMs: 775,
    target: 'postgres:orders',
    remainingMs: 773,
    timeoutMs: 753,
    elapsedMs: 31.4,
    outcome: 'ok',
    msg: 'deadline: call ok',
  },
  // A handler's own line: the mixin's fields, but no span.
  { level: 30, time: T0 + 100, traceId: TRACE, hop: 'inventory', budgetMs: 714, remainingMs: 655, msg: 'checking' },
  {
    level: 40,
    time: T0 + 756,
    traceId: TRACE,
    hop: 'inventory',
    method: 'GET',
    path: '/stock/42',
    budgetSource: 'x-request-deadline',
    budgetHeader: '714',
    budgetMs: 714,
    trusted: true,
    elapsedMs: 714.8,
    statusCode: 504,
    outcome: 'deadline_exceeded',
    exceededBy: 'inventory',
    msg: 'deadline: deadline_exceeded',
  },
  {
    level: 40,
    time: T0 + 758,
    traceId: TRACE,
    hop: 'orders',
    budgetMs: 775,
    target: 'GET http://127.0.0.1:4102/stock/42',
    remainingMs: 736,
    timeoutMs: 716,
    elapsedMs: 718.6,
    statusCode: 504,
    outcome: 'deadline_exceeded',
    phase: 'during-call',
    whose: 'downstream:inventory',
    error: 'deadline exceeded in inventory',
    msg: 'deadline: call deadline_exceeded',
  },
  {
    level: 40,
    time: T0 + 759,
    traceId: TRACE,
    hop: 'orders',
    method: 'POST',
    path: '/orders',
    budgetSource: 'x-request-deadline',
    budgetMs: 775,
    trusted: true,
    elapsedMs: 754.5,
    statusCode: 504,
    outcome: 'deadline_exceeded',
    exceededBy: 'inventory',
    msg: 'deadline: deadline_exceeded',
  },
  {
    level: 40,
    time: T0 + 760,
    traceId: TRACE,
    hop: 'gateway',
    budgetMs: 800,
    target: 'POST http://127.0.0.1:4101/orders',
    remainingMs: 797,
    timeoutMs: 777,
    elapsedMs: 757.2,
    statusCode: 504,
    outcome: 'deadline_exceeded',
    phase: 'during-call',
    whose: 'downstream:inventory',
    msg: 'deadline: call deadline_exceeded',
  },
  {
    level: 40,
    time: T0 + 761,
    traceId: TRACE,
    hop: 'gateway',
    method: 'POST',
    path: '/checkout',
    budgetSource: 'default',
    budgetMs: 800,
    trusted: false,
    elapsedMs: 760.6,
    statusCode: 504,
    outcome: 'deadline_exceeded',
    exceededBy: 'inventory',
    msg: 'deadline: deadline_exceeded',
  },
  // The task's own query: the mixin adds the task's bindings (task, detachedFrom) to its line.
  {
    level: 30,
    time: T0 + 771,
    traceId: TRACE,
    hop: 'orders',
    task: 'release-stock',
    detachedFrom: 'b7ad6b7169203331',
    detached: true,
    budgetMs: 5000,
    target: 'postgres:orders',
    remainingMs: 4990,
    timeoutMs: 4970,
    elapsedMs: 8.1,
    outcome: 'ok',
    msg: 'deadline: call ok',
  },
  {
    level: 30,
    time: T0 + 772,
    traceId: TRACE,
    hop: 'orders',
    task: 'release-stock',
    detachedFrom: 'b7ad6b7169203331',
    detached: true,
    budgetMs: 5000,
    remainingMs: 4987,
    elapsedMs: 12.3,
    outcome: 'ok',
    msg: 'background task done',
  },
];

/** Another trace: a request whose call was refused for lack of time (such a line has no elapsedMs). */
const refused: Line[] = [
  {
    level: 40,
    time: T0 + 2030,
    traceId: OTHER,
    hop: 'gateway',
    target: 'GET http://127.0.0.1:4101/orders/7',
    remainingMs: 0,
    outcome: 'deadline_exceeded',
    phase: 'before-call',
    whose: 'local',
    error: 'not starting: 0 ms left',
    msg: 'deadline: call deadline_exceeded',
  },
  {
    level: 40,
    time: T0 + 2032,
    traceId: OTHER,
    hop: 'gateway',
    method: 'GET',
    path: '/orders/7',
    budgetSource: 'x-request-timeout',
    budgetMs: 30,
    elapsedMs: 31.5,
    statusCode: 504,
    outcome: 'deadline_exceeded',
    exceededBy: 'gateway',
    msg: 'deadline: deadline_exceeded',
  },
];

const throwing = Object.defineProperty({}, 'traceId', {
  enumerable: true,
  get() {
    throw new Error('a getter that throws');
  },
});

const garbage = [
  null,
  42,
  'not json',
  [],
  {},
  throwing,
  { msg: 'deadline: ok' },
  { level: 30, time: T0 - 5000, hop: 'gateway', msg: 'server listening' },
  // Of the trace, but unplaceable: a time that is no time, a negative elapsed, a call line without its target.
  { traceId: TRACE, hop: 'gateway', method: 'GET', path: '/x', outcome: 'ok', msg: 'deadline: ok', time: 'yesterday' },
  {
    traceId: TRACE,
    hop: 'orders',
    target: 'postgres:orders',
    outcome: 'ok',
    msg: 'deadline: call ok',
    time: T0 + 50,
    elapsedMs: -4,
  },
  { traceId: TRACE, hop: 'orders', outcome: 'ok', msg: 'deadline: call ok', time: T0 + 50, elapsedMs: 4 },
  { traceId: TRACE, hop: 'gateway', err: { message: 'boom' }, msg: 'deadline: the onTimeout hook threw', time: T0 + 9 },
  // Another line that happens to have a target and an outcome, with a message of its own.
  { traceId: TRACE, hop: 'orders', target: 'cache', outcome: 'ok', msg: 'cache warmed', time: T0 + 20, elapsedMs: 1 },
  // Fastify's own lines, as the demo's chain writes them through the same logger.
  {
    level: 30,
    time: T0 + 761,
    traceId: TRACE,
    hop: 'gateway',
    reqId: 'req-o',
    res: { statusCode: 504 },
    responseTime: 760.9,
    msg: 'request completed',
  },
  {
    level: 50,
    time: T0 + 761,
    traceId: TRACE,
    hop: 'gateway',
    reqId: 'req-o',
    err: {
      type: 'DeadlineExceededError',
      target: 'POST http://127.0.0.1:4101/orders',
      elapsedMs: 757,
      phase: 'during-call',
    },
    msg: 'call to POST http://127.0.0.1:4101/orders cut off (the deadline of inventory)',
  },
] as unknown as Line[];

const lines: Line[] = [...garbage.slice(0, 4), ...checkout, ...garbage.slice(4), ...refused];

const tables: ScenarioTable[] = [
  {
    id: 1,
    title: 'Client gives up at 300 ms',
    note: 'Dead work: time the downstream kept working after the client had given up.',
    columns: ['mode', 'client waited (ms)', 'dead work (ms)', 'downstream'],
    rows: [
      ['propagated deadline', 301.24, 0, 'stopped'],
      ['fixed 5 s timeout', 300.4, 712, null],
    ],
  },
  { id: 2, title: 'Postgres statement_timeout', columns: [], rows: [], skipped: 'no DATABASE_URL' },
];

/** The spans of the checkout, in the fields the assertions look at. */
function outline(spans: WaterfallSpan[]) {
  return spans.map((span) => [span.kind, span.hop, span.label, span.depth]);
}

function lengthOf(text: string): number {
  return Array.from(text).length;
}

function stripAnsi(text: string): string {
  return text.replace(new RegExp(`${String.fromCharCode(27)}\\[\\d+m`, 'g'), '');
}

function count(text: string, what: string): number {
  return text.split(what).length - 1;
}

describe('waterfallFor', () => {
  const spans = waterfallFor(lines, TRACE);

  it('has one span per request, call and task of the trace, nested, parents before children', () => {
    expect(outline(spans)).toEqual([
      ['request', 'gateway', 'POST /checkout', 0],
      ['call', 'gateway', 'POST http://127.0.0.1:4101/orders', 1],
      ['request', 'orders', 'POST /orders', 2],
      ['call', 'orders', 'postgres:orders', 3],
      ['call', 'orders', 'GET http://127.0.0.1:4102/stock/42', 3],
      ['request', 'inventory', 'GET /stock/42', 4],
      ['task', 'orders', 'release-stock', 3],
      ['call', 'orders', 'postgres:orders', 4],
    ]);
  });

  it('places each span at time - elapsedMs .. time, from the earliest start, sorted by start', () => {
    const times = spans.map((span) => [span.startMs, span.endMs]);
    const expected = [
      [0, 760.6],
      [2.4, 759.6],
      [4.1, 758.6],
      [6.2, 37.6],
      [39, 757.6],
      [40.8, 755.6],
      [759.3, 771.6],
      [762.5, 770.6],
    ];
    times.forEach(([start, end], i) => {
      expect(start).toBeCloseTo(expected[i]?.[0] as number, 3);
      expect(end).toBeCloseTo(expected[i]?.[1] as number, 3);
    });
    const starts = spans.map((span) => span.startMs);
    expect(starts).toEqual([...starts].sort((a, b) => a - b));
  });

  it('keeps what each kind of line says', () => {
    expect(spans[0]).toMatchObject({
      kind: 'request',
      budgetMs: 800,
      elapsedMs: 760.6,
      statusCode: 504,
      outcome: 'deadline_exceeded',
      exceededBy: 'inventory',
    });
    expect(spans[4]).toMatchObject({
      kind: 'call',
      target: 'GET http://127.0.0.1:4102/stock/42',
      remainingMs: 736,
      timeoutMs: 716,
      elapsedMs: 718.6,
      outcome: 'deadline_exceeded',
      phase: 'during-call',
    });
    expect(spans[6]).toMatchObject({ kind: 'task', label: 'release-stock', budgetMs: 5000, outcome: 'ok' });
  });

  it('gives a refused call (no elapsedMs) a span of no length', () => {
    const other = waterfallFor(lines, OTHER);
    expect(outline(other)).toEqual([
      ['request', 'gateway', 'GET /orders/7', 0],
      ['call', 'gateway', 'GET http://127.0.0.1:4101/orders/7', 1],
    ]);
    expect(other[1]?.elapsedMs).toBe(0);
    expect(other[1]?.startMs).toBe(other[1]?.endMs);
  });

  it('does not depend on the order of the lines', () => {
    expect(waterfallFor([...lines].reverse(), TRACE)).toEqual(spans);
  });

  it('nests concurrent requests under the call whose URL has their path', () => {
    const call = (path: string, end: number, elapsedMs: number): Line => ({
      time: T0 + end,
      traceId: 't',
      hop: 'orders',
      target: `GET http://127.0.0.1:4102${path}`,
      elapsedMs,
      outcome: 'ok',
      msg: 'deadline: call ok',
    });
    const request = (hop: string, path: string, end: number, elapsedMs: number): Line => ({
      time: T0 + end,
      traceId: 't',
      hop,
      method: 'GET',
      path,
      budgetMs: 500,
      elapsedMs,
      statusCode: 200,
      outcome: 'ok',
      msg: 'deadline: ok',
    });
    // Both calls contain both requests in time: only the paths tell them apart.
    const overlapping = [
      request('orders', '/orders/1', 300, 300),
      call('/stock/1', 200, 190),
      call('/stock/2', 201, 190),
      request('inventory', '/stock/2', 197, 184),
      request('inventory', '/stock/1', 198, 184),
    ];
    expect(outline(waterfallFor(overlapping, 't'))).toEqual([
      ['request', 'orders', 'GET /orders/1', 0],
      ['call', 'orders', 'GET http://127.0.0.1:4102/stock/1', 1],
      ['request', 'inventory', 'GET /stock/1', 2],
      ['call', 'orders', 'GET http://127.0.0.1:4102/stock/2', 1],
      ['request', 'inventory', 'GET /stock/2', 2],
    ]);
  });

  it('nests by where a span starts: a downstream outlives the call cut off at its timeout, and so does its query', () => {
    // As measured in a run of the demo: orders gives up on inventory at its 684 ms timeout; inventory answers 504 a
    // few ms later, and its query is cancelled a few ms after that.
    const t = (start: number, elapsedMs: number) => ({ time: T0 + start + elapsedMs, elapsedMs, traceId: 't' });
    const outliving: Line[] = [
      {
        ...t(0.7, 798.5),
        hop: 'orders',
        method: 'GET',
        path: '/orders/9',
        outcome: 'deadline_exceeded',
        msg: 'deadline: deadline_exceeded',
      },
      {
        ...t(104.9, 689.3),
        hop: 'orders',
        target: 'GET http://127.0.0.1:46423/stock/sku-9',
        outcome: 'deadline_exceeded',
        msg: 'deadline: call deadline_exceeded',
      },
      {
        ...t(106.4, 694.8),
        hop: 'inventory',
        method: 'GET',
        path: '/stock/sku-9',
        outcome: 'deadline_exceeded',
        msg: 'deadline: deadline_exceeded',
      },
      {
        ...t(106.9, 700.3),
        hop: 'inventory',
        target: 'inventory-db',
        outcome: 'deadline_exceeded',
        msg: 'deadline: call deadline_exceeded',
      },
    ];
    expect(outline(waterfallFor(outliving, 't'))).toEqual([
      ['request', 'orders', 'GET /orders/9', 0],
      ['call', 'orders', 'GET http://127.0.0.1:46423/stock/sku-9', 1],
      ['request', 'inventory', 'GET /stock/sku-9', 2],
      ['call', 'inventory', 'inventory-db', 3],
    ]);
  });

  it("nests each retry attempt's request, and its query, under that attempt", () => {
    const t = (start: number, elapsedMs: number) => ({ time: T0 + start + elapsedMs, elapsedMs, traceId: 't' });
    const attempt = (start: number, elapsedMs: number, outcome: string): Line => ({
      ...t(start, elapsedMs),
      hop: 'orders',
      target: 'GET http://127.0.0.1:4102/stock/1',
      outcome,
      msg: `deadline: call ${outcome}`,
    });
    const stock = (start: number, elapsedMs: number): Line => ({
      ...t(start, elapsedMs),
      hop: 'inventory',
      method: 'GET',
      path: '/stock/1',
      outcome: 'ok',
      msg: 'deadline: ok',
    });
    const query = (start: number, elapsedMs: number): Line => ({
      ...t(start, elapsedMs),
      hop: 'inventory',
      target: 'inventory-db',
      outcome: 'ok',
      msg: 'deadline: call ok',
    });
    // The first attempt is cut at 400 ms; its request and query run on past the second attempt's start.
    const retried = [
      { ...t(0, 700), hop: 'orders', method: 'GET', path: '/orders/1', outcome: 'ok', msg: 'deadline: ok' },
      attempt(1, 399, 'deadline_exceeded'),
      stock(2, 408),
      query(3, 409),
      attempt(401, 200, 'ok'),
      stock(402, 198),
      query(403, 150),
    ];
    expect(waterfallFor(retried, 't').map((span) => [span.label, Math.round(span.startMs), span.depth])).toEqual([
      ['GET /orders/1', 0, 0],
      ['GET http://127.0.0.1:4102/stock/1', 1, 1],
      ['GET /stock/1', 2, 2],
      ['inventory-db', 3, 3],
      ['GET http://127.0.0.1:4102/stock/1', 401, 1],
      ['GET /stock/1', 402, 2],
      ['inventory-db', 403, 3],
    ]);
  });

  it('is empty for a trace it has no lines of', () => {
    expect(waterfallFor(lines, 'nope')).toEqual([]);
    expect(waterfallFor([], TRACE)).toEqual([]);
  });
});

describe('pickTrace', () => {
  it('picks the trace with the most spans', () => {
    expect(pickTrace(lines)).toBe(TRACE);
  });

  it('breaks ties by the earliest start, and needs a request line', () => {
    const only = (traceId: string, time: number): Line => ({
      time,
      traceId,
      hop: 'gateway',
      method: 'GET',
      path: '/',
      elapsedMs: 5,
      outcome: 'ok',
      msg: 'deadline: ok',
    });
    // Many spans, but no request line: not a candidate.
    const callsOnly = Array.from({ length: 5 }, (_, i) => ({
      time: T0 + i,
      traceId: 'calls',
      hop: 'orders',
      target: 'postgres:orders',
      elapsedMs: 1,
      outcome: 'ok',
      msg: 'deadline: call ok',
    }));
    expect(pickTrace([only('late', T0 + 100), only('early', T0 + 50), ...callsOnly])).toBe('early');
    expect(pickTrace(callsOnly)).toBeUndefined();
    expect(pickTrace(garbage)).toBeUndefined();
  });
});

describe('renderWaterfallText', () => {
  const spans = waterfallFor(lines, TRACE);

  it('draws an axis and one row per span, with their numbers, in ASCII within the width', () => {
    const text = renderWaterfallText(spans);
    const rows = text.split('\n');
    expect(rows).toHaveLength(spans.length + 1);
    expect(rows[0]).toMatch(/ 0-+386-+772 ms$/);
    expect(rows[1]).toContain('budget 800, took 761 ms, 504 deadline_exceeded (by inventory)');
    expect(rows[1]).toMatch(/^gateway POST \/checkout/);
    // Too long for the row at this width: the phase goes first.
    expect(rows[2]).toContain('left 797, timeout 777, took 757 ms, deadline_exceeded ');
    expect(rows[3]).toMatch(/^ {4}orders POST \/orders/);
    expect(rows[4]).toContain('left 773, timeout 753, took 31 ms, ok');
    expect(rows[6]).toContain('budget 714, took 715 ms, 504 deadline_exceeded (by inventory)');
    expect(rows[7]).toContain('budget 5000, took 12 ms, ok');
    for (const row of rows) expect(row.length).toBeLessThanOrEqual(100);
    expect(text).toMatch(/^[\x20-\x7e\n]*$/);
  });

  it('puts each bar at its place on the axis', () => {
    const rows = renderWaterfallText(spans).split('\n');
    const axisStart = (rows[0] as string).indexOf('0-');
    const barStart = (row: string) => row.indexOf('#') - axisStart;
    // The gateway's request starts at 0; inventory's request at 40.8 of 771.6 ms; the task at ~98% of the axis.
    expect(barStart(rows[1] as string)).toBe(0);
    const axisWidth = 100 - axisStart;
    expect(barStart(rows[6] as string)).toBe(Math.floor((40.8 / 771.6) * axisWidth));
    expect(barStart(rows[7] as string)).toBeGreaterThan(axisWidth * 0.95);
  });

  it('stays within a narrow width, cutting labels and numbers', () => {
    for (const width of [1, 10, 40, 60]) {
      const rows = renderWaterfallText(spans, { width }).split('\n');
      for (const row of rows) expect(row.length).toBeLessThanOrEqual(width);
    }
  });

  it('colours bad outcomes red and ok ones green, and only adds colour', () => {
    const coloured = renderWaterfallText(spans, { color: true });
    expect(coloured).toContain('\x1b[31m');
    expect(coloured).toContain('\x1b[32m');
    expect(stripAnsi(coloured)).toBe(renderWaterfallText(spans));
  });

  it('uses block bars and arrows only when asked', () => {
    const text = renderWaterfallText(spans, { unicode: true });
    expect(text).toContain('█');
    expect(text).toContain('budget 800 · took 761 ms');
    expect(text).toContain('left 773 · timeout 753 · took 31 ms · ok');
  });

  it('keeps terminal escapes from the logs out of the drawing', () => {
    const [first] = spans;
    const hostile = { ...(first as WaterfallSpan), hop: '\x1b[2Jevil', label: 'GET /caf\u00e9' };
    const text = renderWaterfallText([hostile]);
    expect(text).not.toContain('\x1b');
    expect(text).toContain('?[2Jevil GET /caf?');
  });
});

describe('renderTableText', () => {
  it('draws a boxed table: title above, numbers right-aligned, null as a dash, the note below', () => {
    expect(renderTableText(tables[0] as ScenarioTable)).toBe(
      [
        '1. Client gives up at 300 ms',
        '+---------------------+--------------------+----------------+------------+',
        '| mode                | client waited (ms) | dead work (ms) | downstream |',
        '+---------------------+--------------------+----------------+------------+',
        '| propagated deadline |              301.2 |              0 | stopped    |',
        '| fixed 5 s timeout   |              300.4 |            712 | —          |',
        '+---------------------+--------------------+----------------+------------+',
        'Dead work: time the downstream kept working after the client had given up.',
      ].join('\n'),
    );
  });

  it('shows a skipped table as its title and the reason', () => {
    expect(renderTableText(tables[1] as ScenarioTable)).toBe(
      '2. Postgres statement_timeout\n  skipped: no DATABASE_URL',
    );
  });
});

describe('renderHtmlReport', () => {
  const spans = waterfallFor(lines, TRACE);
  const page = renderHtmlReport({
    title: 'deadline demo',
    generatedAt: new Date(T0),
    machine: 'linux x64, 8 CPUs, Node 20.20.0',
    tables,
    waterfall: spans,
    traceId: TRACE,
  });

  it('is one HTML5 document with every table and one SVG waterfall', () => {
    expect(page.startsWith('<!doctype html>')).toBe(true);
    expect(count(page, '<svg')).toBe(1);
    expect(count(page, '</svg>')).toBe(1);
    expect(count(page, '<table')).toBe(1);
    expect(count(page, '</table>')).toBe(1);
    for (const table of tables) expect(page).toContain(table.title);
    expect(page).toContain('skipped: no DATABASE_URL');
    expect(page).toContain('<time datetime="2025-06-15T15:06:40.000Z">');
    expect(page).toContain(TRACE);
  });

  it('draws a bar with a tooltip per span, coloured by outcome', () => {
    expect(count(page, '<rect')).toBe(spans.length);
    // The document's title, and one per span.
    expect(count(page, '<title>')).toBe(spans.length + 1);
    expect(count(page, 'class="span request deadline"')).toBe(3);
    expect(count(page, 'class="span call ok"')).toBe(2);
    expect(page).toContain('budget 800 · took 761 ms, 504 deadline_exceeded (by inventory)');
    expect(page).toContain('class="legend"');
  });

  it('has balanced tags and needs nothing from outside', () => {
    for (const tag of ['section', 'table', 'thead', 'tbody', 'tr', 'g', 'svg', 'ul', 'li', 'p', 'h2']) {
      expect(count(page, `<${tag}>`) + count(page, `<${tag} `)).toBe(count(page, `</${tag}>`));
    }
    expect(page).not.toMatch(/<script|<link|src=|url\(/i);
  });

  it('says so when there is no waterfall to draw', () => {
    const empty = renderHtmlReport({
      title: 't',
      generatedAt: new Date(Number.NaN),
      machine: 'm',
      tables: [],
      waterfall: [],
      traceId: undefined,
    });
    expect(empty).not.toContain('<svg');
    expect(empty).toContain('at an unknown time');
  });
});

describe('properties', () => {
  const traceIds = ['t1', 't2'];
  /** Lines close enough to the real ones to reach the nesting, mixed with any object at all. */
  const almostLine = fc.record(
    {
      traceId: fc.constantFrom<unknown>('t1', 't2', undefined, 7),
      hop: fc.constantFrom<unknown>('gateway', 'orders', 'inventory', undefined, null),
      msg: fc.constantFrom<unknown>('deadline: ok', 'deadline: call ok', 'background task done', undefined, 'x'),
      outcome: fc.constantFrom<unknown>('ok', 'deadline_exceeded', 'error', undefined, 3),
      method: fc.constantFrom<unknown>('GET', undefined),
      path: fc.oneof(fc.string(), fc.constant('/stock/1')),
      target: fc.oneof(fc.string(), fc.constant('GET http://127.0.0.1:1/stock/1'), fc.constant(undefined)),
      task: fc.option(fc.string(), { nil: undefined }),
      detached: fc.boolean(),
      phase: fc.constantFrom<unknown>('before-call', 'during-call', undefined),
      time: fc.oneof(fc.integer({ min: 0, max: 1000 }), fc.double(), fc.string()),
      elapsedMs: fc.oneof(fc.integer({ min: 0, max: 1000 }), fc.double(), fc.constant(undefined)),
      budgetMs: fc.oneof(fc.integer(), fc.double(), fc.string()),
      remainingMs: fc.oneof(fc.integer(), fc.double()),
      statusCode: fc.oneof(fc.integer(), fc.string()),
    },
    { requiredKeys: [] },
  );
  const anyLines = fc.array(fc.oneof(almostLine, fc.object(), fc.anything()), { maxLength: 60 }) as fc.Arbitrary<
    Line[]
  >;

  it('waterfallFor never throws, and its spans form a tree drawn within the width', () => {
    fc.assert(
      fc.property(anyLines, fc.constantFrom(...traceIds), fc.integer({ min: 1, max: 300 }), (input, traceId, width) => {
        const spans = waterfallFor(input, traceId);
        expect(spans.length).toBeLessThanOrEqual(input.length);
        spans.forEach((span, i) => {
          const above = i === 0 ? -1 : (spans[i - 1] as WaterfallSpan).depth;
          expect(span.depth).toBeGreaterThanOrEqual(0);
          expect(span.depth).toBeLessThanOrEqual(above + 1);
          expect(span.startMs).toBeGreaterThanOrEqual(0);
        });
        const picked = pickTrace(input);
        if (picked !== undefined) expect(traceIds).toContain(picked);
        for (const row of renderWaterfallText(spans, { width }).split('\n')) {
          expect(row.length).toBeLessThanOrEqual(width);
        }
        renderHtmlReport({ title: '', generatedAt: new Date(), machine: '', tables: [], waterfall: spans, traceId });
      }),
    );
  });

  const cell = fc.oneof(fc.string({ unit: 'binary' }), fc.double(), fc.integer(), fc.constant(null));
  const table = fc.record({
    id: fc.integer(),
    title: fc.string({ unit: 'binary' }),
    note: fc.option(fc.string({ unit: 'binary' }), { nil: undefined }),
    columns: fc.array(fc.string({ unit: 'binary' }), { maxLength: 6 }),
    rows: fc.array(fc.array(cell, { maxLength: 7 }), { maxLength: 6 }),
  });

  it('renderTableText never throws, and every line of the box has the same length', () => {
    fc.assert(
      fc.property(table, (input) => {
        const lines = renderTableText(input).split('\n');
        const columns = Math.max(input.columns.length, ...input.rows.map((row) => row.length));
        const noteLines = input.note === undefined ? 0 : input.note.split('\n').length;
        if (columns === 0) return;
        const height = 3 + input.rows.length + (input.rows.length > 0 ? 1 : 0);
        expect(lines).toHaveLength(1 + height + noteLines);
        const box = lines.slice(1, 1 + height);
        for (const line of box) {
          expect(line).toMatch(/^[+|]/);
          expect(lengthOf(line)).toBe(lengthOf(box[0] as string));
        }
        // Nothing that could move the cursor or recolour the terminal.
        for (const line of lines) expect(line).not.toMatch(/[\p{Cc}\p{Cf}]/u);
      }),
    );
  });

  /** A string with something to escape, between markers that appear nowhere in the page's own markup. */
  const dangerous = fc
    .tuple(
      fc.oneof(fc.string({ unit: 'binary' }), fc.constant('<script>alert(1)</script>')),
      fc.constantFrom('<', '>', '&', '"', "'", '<SCRIPT src=x>', '"><img onerror=x>'),
      fc.string({ unit: 'binary' }),
    )
    .map(([before, special, after]) => `Q${before}${special}${after}Q`);

  type Place = (value: string) => Parameters<typeof renderHtmlReport>[0];
  const base = waterfallFor(lines, TRACE);
  const input = (changes: Partial<Parameters<typeof renderHtmlReport>[0]>) => ({
    title: 'title',
    generatedAt: new Date(T0),
    machine: 'machine',
    tables,
    waterfall: base,
    traceId: TRACE,
    ...changes,
  });
  const withSpan = (change: Partial<WaterfallSpan>) => [{ ...(base[4] as WaterfallSpan), ...change } as WaterfallSpan];
  const withTable = (change: Partial<ScenarioTable>) => [{ ...(tables[0] as ScenarioTable), ...change }];
  const places: Record<string, Place> = {
    title: (title) => input({ title }),
    machine: (machine) => input({ machine }),
    traceId: (traceId) => input({ traceId }),
    'table title': (title) => input({ tables: withTable({ title }) }),
    note: (note) => input({ tables: withTable({ note }) }),
    skipped: (skipped) => input({ tables: withTable({ skipped }) }),
    column: (column) => input({ tables: withTable({ columns: [column, 'b'] }) }),
    cell: (value) => input({ tables: withTable({ rows: [[value, 1]] }) }),
    hop: (hop) => input({ waterfall: withSpan({ hop }) }),
    label: (label) => input({ waterfall: withSpan({ label }) }),
    outcome: (outcome) => input({ waterfall: withSpan({ outcome }) }),
    phase: (phase) => input({ waterfall: withSpan({ phase } as Partial<WaterfallSpan>) }),
    exceededBy: (exceededBy) => input({ waterfall: [{ ...(base[0] as WaterfallSpan), exceededBy } as WaterfallSpan] }),
  };

  it('the page has no Q of its own (so that the markers below mean something)', () => {
    for (const place of Object.values(places)) expect(renderHtmlReport(place('x'))).not.toContain('Q');
  });

  it('renderHtmlReport escapes every string it is given, in text and attributes alike', () => {
    fc.assert(
      fc.property(fc.constantFrom(...Object.keys(places)), dangerous, (where, value) => {
        const page = renderHtmlReport((places[where] as Place)(value));
        expect(page).not.toContain(value);
        expect(page).not.toMatch(/<script/i);
        expect(count(page, '<svg')).toBe(count(page, '</svg>'));
        expect(count(page, '<table')).toBe(count(page, '</table>'));
      }),
    );
  });
});
