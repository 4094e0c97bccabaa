/**
 * The answers a hop gives when time is up: 504 with a small JSON body and `X-Deadline-Exceeded-By`, or 499
 * when the work was cancelled. And the guard that makes a handler's late attempt to answer a no-op.
 */
import type { ServerResponse } from 'node:http';
import { CancelledError, type DeadlineExceededError } from '@deadline/core';
import type { AdmissionRefusal } from '@deadline/core/internal';
import { DEADLINE_EXCEEDED_BY_HEADER, DEADLINE_REFUSED_BY_HEADER } from '@deadline/core/wire';

/**
 * The JSON body of a 504 sent because a deadline passed.
 *
 * @example
 * ```ts
 * const body = (await res.json()) as DeadlineExceededBody;
 * if (body.error === 'deadline_exceeded') console.log(`${body.exceededBy} ran out after ${body.elapsedMs} ms`);
 * ```
 */
export interface DeadlineExceededBody {
  error: 'deadline_exceeded';
  /** The budget the hop ran with, in ms. */
  budgetMs: number;
  /** Time from the request's arrival to the answer, in ms. */
  elapsedMs: number;
  /** The hop whose deadline fired (this one, or a downstream that reported its own). */
  exceededBy: string;
}

/**
 * The JSON body of a 503 sent by a hop that refused a request at arrival because it was overloaded (admission).
 *
 * @example
 * ```ts
 * const body = (await res.json()) as OverloadedBody;
 * if (body.error === 'overloaded') console.log(`${body.refusedBy}: ${body.neededMs} ms needed, ${body.remainingMs} left`);
 * ```
 */
export interface OverloadedBody {
  error: 'overloaded';
  /** The hop that refused. */
  refusedBy: string;
  /** `overloaded`: its queue (twice) plus the route's time was more than was left; `low-priority`: shed first. */
  reason: 'overloaded' | 'low-priority';
  /** The request's remaining budget at arrival, in whole ms rounded down. */
  remainingMs: number;
  /** The queue twice plus the route's expected time, in whole ms rounded up (so always more than `remainingMs`). */
  neededMs: number;
  /** The server's queue (event-loop delay) at arrival, in ms. */
  queueMs: number;
}

/**
 * What a hop sends for a deadline error (or a cancellation): status, headers and body.
 *
 * @example
 * ```ts
 * const answer: DeadlineAnswer = { statusCode: 504, headers: { 'content-type': 'text/plain' }, body: 'out of time' };
 * ```
 */
export interface DeadlineAnswer {
  statusCode: number;
  headers: Record<string, string>;
  body: string | undefined;
}

/** @internal */
export function deadlineAnswer(
  error: DeadlineExceededError | CancelledError,
  budgetMs: number,
  elapsedMs: number,
  hop: string,
): DeadlineAnswer {
  if (error instanceof CancelledError) return { statusCode: 499, headers: {}, body: undefined };
  const exceededBy = error.hop ?? hop;
  const body: DeadlineExceededBody = {
    error: 'deadline_exceeded',
    budgetMs: Math.round(budgetMs),
    elapsedMs: Math.round(elapsedMs),
    exceededBy,
  };
  return {
    statusCode: 504,
    headers: { 'content-type': 'application/json; charset=utf-8', [DEADLINE_EXCEEDED_BY_HEADER]: exceededBy },
    body: JSON.stringify(body),
  };
}

/** @internal The 503 of a request shed at arrival: `Retry-After` and the hop that refused. */
export function overloadedAnswer(refusal: AdmissionRefusal, hop: string): DeadlineAnswer {
  const body: OverloadedBody = {
    error: 'overloaded',
    refusedBy: hop,
    reason: refusal.reason === 'low-priority' ? 'low-priority' : 'overloaded',
    // Rounded apart, as the log line's message does: whole numbers that still show needed > left.
    remainingMs: Math.floor(refusal.remainingMs),
    neededMs: Math.ceil(refusal.neededMs),
    queueMs: Math.round(refusal.queueMs),
  };
  return {
    statusCode: 503,
    headers: {
      'content-type': 'application/json; charset=utf-8',
      'retry-after': String(refusal.retryAfterS),
      [DEADLINE_REFUSED_BY_HEADER]: hop,
    },
    body: JSON.stringify(body),
  };
}

/**
 * Writes `answer` on a raw response if it can still be answered; a response already half-sent is destroyed
 * instead (its client would otherwise wait on a body that will not come). Returns whether it answered.
 * @internal
 */
export function writeAnswer(res: ServerResponse, answer: DeadlineAnswer, error: Error): boolean {
  if (res.writableEnded || res.destroyed) return false;
  if (res.headersSent) {
    res.destroy(error);
    return false;
  }
  res.writeHead(answer.statusCode, answer.headers);
  res.end(answer.body);
  silenceLateWrites(res);
  return true;
}

function ignore(this: ServerResponse, ...args: unknown[]): ServerResponse {
  const callback = args.at(-1);
  if (typeof callback === 'function') process.nextTick(callback as () => void);
  return this;
}

function acceptWrite(this: ServerResponse, ...args: unknown[]): boolean {
  ignore.apply(this, args);
  // "Keep writing": a streaming handler must not wait for a 'drain' that will never come.
  return true;
}

/**
 * After the hop answered for the handler, the handler's own late answer is dropped quietly: no
 * ERR_HTTP_HEADERS_SENT thrown into it, no write-after-end error event, no log spam. Only this response
 * object is changed, and only on this path.
 * @internal
 */
export function silenceLateWrites(res: ServerResponse): void {
  const late = res as unknown as Record<string, unknown>;
  for (const method of ['writeHead', 'setHeader', 'setHeaders', 'appendHeader', 'removeHeader', 'flushHeaders']) {
    late[method] = ignore;
  }
  late.write = acceptWrite;
  late.end = ignore;
}
