/**
 * What the app's error handlers see of a deadline: nothing. An error that means this request ran out of time (its
 * own deadline, or a downstream's it reported) or was cancelled is answered by the plugin, as the deadline's own
 * answer is: 504 with `X-Deadline-Exceeded-By` naming the hop and the plugin's JSON body, or 499. An app's catch-all
 * (`setErrorHandler` logging at error level, answering 500) would otherwise turn a deadline into a 500 and an error
 * line. Such errors come often and early: a database call is cut a margin before the request's deadline, so that this
 * hop can still answer in time.
 *
 * fastify's error handlers form a chain — the route's own, then its instance's, up to the root's — and one that
 * throws hands the error to the next. The plugin gives every route added after it that has no `errorHandler` of its
 * own this one, first in the chain: deadline errors are answered here, every other error goes on to the app's
 * handlers unchanged. The app's `onError` hooks, which run before any error handler, still see them all. A route
 * with its own `errorHandler` gets every error, as before.
 */
import { ErrorCode, findDeadlineError, isDeadlineError } from '@deadline/core';
import { findErrorWithCode } from '@deadline/core/internal';
import type { RequestState } from '@deadline/server/internal';
import type { FastifyReply, FastifyRequest } from 'fastify';

/**
 * The route error handler the plugin gives routes without their own: answers deadline errors and cancellations,
 * passes every other error on to the next handler (rejected, so that fastify hands it on as it was, an `Error` or
 * not).
 *
 * @example
 * ```ts
 * fastify.addHook('onRoute', (route) => {
 *   route.errorHandler ??= answerDeadlineErrors;
 * });
 * ```
 */
export async function answerDeadlineErrors(error: unknown, request: FastifyRequest, reply: FastifyReply) {
  const state = request.deadline as RequestState | null;
  const typed = state === null ? undefined : findDeadlineError(error);
  if (state === null || typed === undefined) throw error;
  const answer = state.answerOf(typed);
  return reply.code(answer.statusCode).headers(answer.headers).send(answer.body);
}

/**
 * Gives an error that wraps a deadline error (and has no status of its own) that error's status and headers: the
 * error handlers of a route the plugin did not see (added before it) then answer it with them — fastify's default one
 * a 504 naming the hop even when global fetch wrapped the error in `TypeError: fetch failed`.
 *
 * @example
 * ```ts
 * fastify.addHook('onError', (request, reply, error, next) => {
 *   lendStatus(error);
 *   next();
 * });
 * ```
 */
export function lendStatus(error: Error & { statusCode?: unknown; status?: unknown }): void {
  if (error.statusCode !== undefined || error.status !== undefined || isDeadlineError(error)) return;
  const typed = findDeadlineError(error) ?? findErrorWithCode(error, ErrorCode.CircuitOpen);
  if (typed === undefined) return;
  try {
    Object.defineProperty(error, 'statusCode', { value: typed.statusCode, configurable: true, writable: true });
    // A deadline error names the hop whose deadline fired; a breaker's refusal says when to come back.
    const headers = typed.headers;
    if (headers !== undefined) {
      Object.defineProperty(error, 'headers', { value: headers, configurable: true, writable: true });
    }
  } catch {
    // A frozen error keeps its 500.
  }
}
