/**
 * The two ends every framework adapter's "app shaped like real ones" test drives through a route that runs
 * `SELECT pg_sleep(5) /* <marker> *\/` on PostgreSQL: a client that leaves mid-query, and a request that runs out of
 * its budget. Each checks what the library promises whatever the framework — the statement gone from the server
 * well before its 5 s, the library's one line, nothing logged at error level, no message said twice — and returns
 * the lines written meanwhile, for the framework's own checks (its catch-all, its error events).
 */
import { request } from 'undici';
import { expect } from 'vitest';
import { marker, type ServerActivity } from '../../pg/test/support/activity.ts';
import { type LogLine, repeatedMessages } from './harness.ts';

/** pino's level numbers: error and fatal. */
const ERROR = 50;
/** How long the route's statement runs by itself (its `pg_sleep(5)`). */
export const STATEMENT_MS = 5_000;
/**
 * How soon a cut statement is gone, and a cut request answered: well before {@link STATEMENT_MS}, so that it was the
 * cut that ended it, with room for what a loaded machine adds.
 */
export const CUT_WITHIN_MS = STATEMENT_MS - 1_000;
/**
 * The budget of the request that runs out of it: a second, so that the statement is on the server before the
 * deadline however slow the machine (the cut then has a statement to stop), and still far short of its 5 s.
 */
export const OUT_OF_BUDGET_MS = 1_000;

/** An app under test: where it listens, the lines its logger wrote, and the route that sleeps (by marker). */
export interface SleepingApp {
  url: string;
  logs: LogLine[];
  activity: ServerActivity;
  /** The path of the route that runs the statement marked `marker`. */
  path(marker: string): string;
}

/**
 * A client that leaves mid-query: the statement gone, one line from the library (`cancelled`, 499), nothing at error
 * level. Returns the lines written since the request was sent.
 */
export async function leaveMidQuery(app: SleepingApp, hop: string): Promise<LogLine[]> {
  const m = marker();
  const before = app.logs.length;
  const client = new AbortController();
  const pending = request(`${app.url}${app.path(m)}`, { signal: client.signal }).catch((error: unknown) => error);
  await app.activity.startedRunning(m);
  const left = performance.now();
  client.abort();
  await pending;
  const gone = await app.activity.goneAt(m);
  expect(gone - left).toBeLessThan(CUT_WITHIN_MS);
  const line = await lineOf(app.logs, before, 'deadline: cancelled');
  expect(line).toMatchObject({ hop, statusCode: 499, outcome: 'cancelled' });
  const lines = app.logs.slice(before);
  expect(lines.filter((l) => l.level >= ERROR)).toEqual([]);
  expect(lines.filter((l) => String(l.msg).startsWith('deadline:'))).toHaveLength(1);
  expect(repeatedMessages(lines)).toEqual([]);
  return lines;
}

/**
 * A request out of its budget: 504 naming the hop at the deadline, its statement stopped, the library's line
 * (`deadline_exceeded`), nothing at error level. Returns the lines written since the request was sent.
 */
export async function runOutOfBudget(app: SleepingApp, hop: string): Promise<LogLine[]> {
  const m = marker();
  const before = app.logs.length;
  const sent = performance.now();
  const pending = request(`${app.url}${app.path(m)}`, { headers: { 'x-request-deadline': String(OUT_OF_BUDGET_MS) } });
  // The statement ran on the server before the cut: the cut had it to stop.
  await app.activity.startedRunning(m);
  const response = await pending;
  const answered = performance.now();
  expect(response.statusCode).toBe(504);
  expect(response.headers['x-deadline-exceeded-by']).toBe(hop);
  expect(await response.body.json()).toMatchObject({ error: 'deadline_exceeded', exceededBy: hop });
  expect(answered - sent).toBeGreaterThanOrEqual(OUT_OF_BUDGET_MS - 10);
  expect(answered - sent).toBeLessThan(CUT_WITHIN_MS);
  const gone = await app.activity.goneAt(m);
  expect(gone - sent).toBeLessThan(CUT_WITHIN_MS);
  const line = await lineOf(app.logs, before, 'deadline: deadline_exceeded');
  expect(line).toMatchObject({ statusCode: 504, exceededBy: hop, budgetMs: OUT_OF_BUDGET_MS });
  const lines = app.logs.slice(before);
  expect(lines.filter((l) => l.level >= ERROR)).toEqual([]);
  expect(repeatedMessages(lines)).toEqual([]);
  return lines;
}

/**
 * A JSON body posted with an 800 ms budget to a route that answers `{ received: <the parsed body>, left: <ms left> }`:
 * parsed by the app's body parser, inside the budget (its arrival anchored before the parser ran).
 */
export async function postWithinBudget(url: string): Promise<void> {
  const res = await request(url, {
    method: 'POST',
    headers: { 'content-type': 'application/json', 'x-request-deadline': '800' },
    body: JSON.stringify({ sku: 'a-1' }),
  });
  const body = (await res.body.json()) as { received: unknown; left: number };
  expect(body.received).toEqual({ sku: 'a-1' });
  expect(body.left).toBeLessThanOrEqual(800);
}

/** The first line with `msg` written since `from`, waited for (the end line follows the response's close). */
export async function lineOf(logs: LogLine[], from: number, msg: string): Promise<LogLine> {
  const until = performance.now() + 5_000;
  for (;;) {
    const line = logs.slice(from).find((l) => l.msg === msg);
    if (line !== undefined) return line;
    if (performance.now() > until) throw new Error(`no "${msg}" line; lines: ${JSON.stringify(logs.slice(from))}`);
    await new Promise((resolve) => setImmediate(resolve));
  }
}
