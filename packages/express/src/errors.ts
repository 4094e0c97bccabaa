/**
 * The error middleware that turns a deadline error escaping a handler into the same answer the deadline
 * itself gives: 504 with the JSON body and `X-Deadline-Exceeded-By`, or 499 for a cancellation.
 */
import type { IncomingMessage, ServerResponse } from 'node:http';
import { DeadlineExceededError, ErrorCode, findDeadlineError } from '@deadline/core';
import { findErrorWithCode } from '@deadline/core/internal';
import { deadlineAnswer, RequestState, writeAnswer } from '@deadline/server/internal';
import { stateOf } from './engine-paths.js';

/**
 * Returns the error middleware. Mount it after your routes. Errors that are not about a deadline pass on to
 * the next error handler untouched. Without it, express's own final handler still answers 504 (or 499) with
 * `X-Deadline-Exceeded-By` — the errors carry `statusCode` and `headers` — but with its own body.
 *
 * @example
 * ```ts
 * app.use(deadline({ serviceName: 'orders' }));
 * app.use(routes);
 * app.use(deadlineErrors());
 * ```
 */
export function deadlineErrors() {
  return function deadlineErrorHandler(
    error: unknown,
    req: IncomingMessage & { deadline?: unknown },
    res: ServerResponse,
    next: (error?: unknown) => void,
  ): void {
    const typed = findDeadlineError(error);
    const state = stateOf(req) ?? req.deadline;
    const known = state instanceof RequestState ? state : undefined;
    // The hop already answered for this request (its deadline passed): the handler's late failure, often our
    // own abort reaching it, says nothing new. Dropped quietly, as the late answer itself is.
    if (typed !== undefined && known?.answeredWith !== undefined) return;
    if (typed === undefined || res.headersSent) {
      // A breaker's refusal wrapped by global fetch (`TypeError: fetch failed`): passed on bare, so Express's
      // handler answers its 503 and Retry-After rather than a 500.
      next(res.headersSent ? error : (findErrorWithCode(error, ErrorCode.CircuitOpen) ?? error));
      return;
    }
    known?.recordError(typed);
    const fromError = typed instanceof DeadlineExceededError ? typed : undefined;
    const answer =
      known === undefined
        ? deadlineAnswer(typed, fromError?.budgetMs ?? 0, fromError?.elapsedMs ?? 0, 'service')
        : known.answerOf(typed);
    if (writeAnswer(res, answer, typed) && known !== undefined) known.answeredWith = answer.statusCode;
  };
}
