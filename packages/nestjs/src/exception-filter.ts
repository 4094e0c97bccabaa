/**
 * The module's exception filter: Nest's exception layer answers a deadline error as the deadline itself is answered —
 * 504 with the JSON body and `X-Deadline-Exceeded-By` naming whose deadline fired (this hop's, or a downstream's) —
 * and a cancellation 499, without a line at error level: the request's own line says what happened. A deadline error
 * after this hop answered (the route's late failure, often the abort reaching it) is dropped quietly.
 */
import { CancelledError, DeadlineExceededError, findDeadlineError } from '@deadline/core';
import { deadlineAnswer } from '@deadline/server/internal';
import { type ArgumentsHost, Catch, type ExceptionFilter, Inject } from '@nestjs/common';
import { HttpAdapterHost } from '@nestjs/core';
import { throwError } from 'rxjs';
import { stateOf } from './request-state.js';
import { rpcAnswerOf } from './rpc-call.js';

interface Replies {
  isHeadersSent(response: unknown): boolean;
  setHeader(response: unknown, name: string, value: string): unknown;
  reply(response: unknown, body: unknown, statusCode?: number): unknown;
  end(response: unknown, message?: string): unknown;
}

/**
 * Answers `DeadlineExceededError` and `CancelledError` on HTTP routes — or, handed one by an app's own filter, any error
 * `findDeadlineError()` explains as one. Provided by {@link DeadlineModule} for the whole app; an app's own catch-all
 * filter that runs first can hand them to it.
 *
 * @example
 * ```ts
 * @Catch()
 * export class AllExceptionsFilter implements ExceptionFilter {
 *   constructor(private readonly deadlines: DeadlineExceptionFilter) {}
 *   catch(exception: unknown, host: ArgumentsHost) {
 *     if (findDeadlineError(exception) !== undefined) return this.deadlines.catch(exception, host);
 *     // … the app's own answer
 *   }
 * }
 * ```
 */
@Catch(DeadlineExceededError, CancelledError)
export class DeadlineExceptionFilter implements ExceptionFilter {
  constructor(@Inject(HttpAdapterHost) private readonly host: HttpAdapterHost) {}

  catch(exception: unknown, host: ArgumentsHost): unknown {
    // Handed over by an app's own filter: what it is found as (an error that is about no deadline is thrown back).
    const typed = findDeadlineError(exception);
    if (typed === undefined) throw exception;
    // A microservice's message: answered on its transport, as an `RpcException` would be.
    if (host.getType() === 'rpc') return throwError(() => rpcAnswerOf(typed, host));
    if (host.getType() !== 'http') return throwError(() => typed);
    const http = host.switchToHttp();
    const response = http.getResponse<unknown>();
    const state = stateOf(http.getRequest());
    const replies = this.host.httpAdapter as unknown as Replies;
    // The hop answered already (its deadline passed), or the response is over (its client left): nothing to answer.
    if (state !== undefined && (state.answeredWith !== undefined || state.res === undefined || state.res.destroyed)) {
      return undefined;
    }
    state?.recordError(typed);
    // NestJS 11's fastify adapter misses headers written straight to `reply.raw` (a stream's): checked there too.
    if (
      replies.isHeadersSent(response) ||
      (response as { raw?: { headersSent?: unknown } }).raw?.headersSent === true
    ) {
      // Half-sent: its client would wait for a body that will not come.
      replies.end(response);
      return undefined;
    }
    const answer =
      state === undefined
        ? deadlineAnswer(typed, (typed as DeadlineExceededError).budgetMs ?? 0, 0, 'service')
        : state.answerOf(typed);
    for (const [name, value] of Object.entries(answer.headers)) replies.setHeader(response, name, value);
    replies.reply(response, answer.body, answer.statusCode);
    if (state !== undefined) state.answeredWith = answer.statusCode;
    return undefined;
  }
}
