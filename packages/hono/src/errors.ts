/**
 * Deadline errors, Hono's way: an `onError` handler that answers them with a `Response` — 504 with the JSON body and
 * `X-Deadline-Exceeded-By` naming whose deadline fired, or 499 for a cancellation — before the app's own handler
 * (or Hono's default one, which prints every error's stack) sees them. And what the middleware does once the routes
 * are done: a response this hop already wrote on Node's is not written again, and a deadline error the app's error
 * handler answered some other way still gets the deadline's answer.
 */
import { ErrorCode, findDeadlineError } from '@deadline/core';
import { findErrorWithCode } from '@deadline/core/internal';
import { deadlineAnswer, RequestState } from '@deadline/server/internal';
import { RESPONSE_ALREADY_SENT } from '@hono/node-server/utils/response';
import type { Context, Env, ErrorHandler } from 'hono';
import type { DeadlineEnv } from './middleware.js';

/**
 * Returns the `onError` handler: a deadline error (found with `findDeadlineError`, so also one that `fetch` wrapped)
 * or a cancellation gets the deadline's answer; a circuit breaker's refusal, `fallback` unwrapped or, without one,
 * 503 with its `Retry-After`; every other error goes to `fallback` — the app's own handler — or, without one, to what
 * Hono's default does (an `HTTPException`'s response; else the error printed and 500).
 *
 * @example
 * ```ts
 * app.onError(
 *   deadlineErrors((err, c) => {
 *     logger.error({ err }, 'request failed');
 *     return c.json({ error: 'internal' }, 500);
 *   }),
 * );
 * ```
 */
export function deadlineErrors<E extends Env = DeadlineEnv>(fallback?: ErrorHandler<E>): ErrorHandler<E> {
  return function deadlineErrorHandler(error, c) {
    const answer = deadlineResponse(c as unknown as Context<DeadlineEnv>, error);
    if (answer !== undefined) return answer;
    const refusal = findErrorWithCode(error, ErrorCode.CircuitOpen);
    if (fallback !== undefined) return fallback((refusal as Error | undefined) ?? error, c);
    if (refusal !== undefined) return c.text(refusal.message, refusal.statusCode as 503, refusal.headers);
    return honoDefault(error, c);
  };
}

/** What Hono's own error handler does (hono-base.ts). */
function honoDefault(error: Error, c: Context): Response | Promise<Response> {
  if ('getResponse' in error && typeof error.getResponse === 'function') {
    const res = error.getResponse() as Response;
    return c.newResponse(res.body, res);
  }
  console.error(error);
  return c.text('Internal Server Error', 500);
}

/** The deadline's answer for `error`, if it is a deadline error or a cancellation; undefined otherwise. */
function deadlineResponse(c: Context<DeadlineEnv>, error: unknown): Response | undefined {
  const typed = findDeadlineError(error);
  if (typed === undefined) return undefined;
  const state = c.get('deadline');
  const known = state instanceof RequestState ? state : undefined;
  // The hop answered already (its deadline passed, on Node's response), or the client left: nothing more to write.
  if (known?.answeredWith !== undefined || written(c)) return RESPONSE_ALREADY_SENT;
  known?.recordError(typed);
  const answer = known === undefined ? deadlineAnswer(typed, 0, 0, 'service') : known.answerOf(typed);
  if (known !== undefined) known.answeredWith = answer.statusCode;
  return new Response(answer.body ?? null, { status: answer.statusCode, headers: answer.headers });
}

/** Whether Node's response can no longer be answered: written, cut, or its client gone. */
function written(c: Context<DeadlineEnv>): boolean {
  const outgoing = c.env?.outgoing;
  return outgoing !== undefined && (outgoing.headersSent || outgoing.destroyed || outgoing.writableEnded);
}

/**
 * The routes are done. A response this hop wrote on Node's at the deadline is not written again. A deadline error
 * that reached an error handler other than {@link deadlineErrors} (the app's `onError` alone, or Hono's default)
 * still gets the deadline's answer, and the request's line says `deadline_exceeded`.
 * @internal
 */
export function answerAfterRoutes(c: Context<DeadlineEnv>, state: RequestState): void {
  if (state.answeredWith !== undefined) {
    if (c.res !== RESPONSE_ALREADY_SENT && written(c)) c.res = RESPONSE_ALREADY_SENT;
    return;
  }
  const error = c.error;
  if (error === undefined) return;
  const answer = deadlineResponse(c, error);
  if (answer !== undefined) c.res = answer;
}
