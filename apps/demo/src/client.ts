/** The demo's client: calls the gateway with a budget and a fresh trace, and measures what it got, when. */
import { traceFrom } from '@deadline/core';
import { formatTraceparent } from '@deadline/core/wire';
import { request } from 'undici';

export interface Answer {
  traceId: string;
  /** The demo's request id, sent as `?rid=` and passed down by every hop (the trace is not, without the library). */
  rid: string;
  status: number | 'gave up';
  /** How long the client waited (ms). */
  waitedMs: number;
  /** When it stopped waiting (performance.now()). */
  endedAt: number;
  /** The hop the gateway named in `X-Deadline-Exceeded-By`, if any. */
  exceededBy: string | undefined;
  body: unknown;
}

/** GET `url` as a client that gives up after `budgetMs` (and tells the server so). */
let requests = 0;

export async function ask(url: string, budgetMs: number): Promise<Answer> {
  const trace = traceFrom();
  const rid = `r${process.pid}-${++requests}`;
  const started = performance.now();
  try {
    const response = await request(`${url}${url.includes('?') ? '&' : '?'}rid=${rid}`, {
      headers: { 'x-request-deadline': String(budgetMs), traceparent: formatTraceparent(trace) },
      // The client's own patience: its budget, plus a little for the 504 to arrive.
      signal: AbortSignal.timeout(budgetMs + 250),
    });
    const text = await response.body.text();
    const endedAt = performance.now();
    let body: unknown = text;
    try {
      body = JSON.parse(text);
    } catch {}
    const exceededBy = response.headers['x-deadline-exceeded-by'];
    return {
      traceId: trace.traceId,
      rid,
      status: response.statusCode,
      waitedMs: endedAt - started,
      endedAt,
      exceededBy: typeof exceededBy === 'string' ? exceededBy : undefined,
      body,
    };
  } catch {
    const endedAt = performance.now();
    return {
      traceId: trace.traceId,
      rid,
      status: 'gave up',
      waitedMs: endedAt - started,
      endedAt,
      exceededBy: undefined,
      body: undefined,
    };
  }
}

/** Resolves when `check()` holds (asked every few ms), or after `limitMs` with false. */
export async function until(check: () => boolean | Promise<boolean>, limitMs = 10_000): Promise<boolean> {
  const end = performance.now() + limitMs;
  while (performance.now() < end) {
    if (await check()) return true;
    await new Promise((resolve) => setTimeout(resolve, 5));
  }
  return false;
}

/** Milliseconds, rounded, for a table cell. */
export const ms = (value: number | undefined): number | null => (value === undefined ? null : Math.round(value));
