/**
 * How fastify answers for a request whose deadline passed: through the reply (so onSend/onResponse hooks and
 * fastify's own request log still see it), and quietly afterwards. And how it lets go of a request whose client left:
 * the reply is hijacked, so the handler's failure (the cancellation reaching its query) is not sent through fastify's
 * error handling to the app's error handler as an unexpected error; the request ends in the plugin's one line.
 */
import type { CancelledError, DeadlineExceededError } from '@deadline/core';
import type { LineLogger } from '@deadline/server';
import type { RequestHost, RequestState } from '@deadline/server/internal';
import type { FastifyReply } from 'fastify';
import { quietLateReplies } from './late-replies.js';

/**
 * The plugin's host for `@deadline/server`.
 *
 * @example
 * ```ts
 * const state = startRequest(request.raw, reply.raw, request.headers, options, fastifyHost, budget, now, limits, reply);
 * ```
 * @internal
 */
export const fastifyHost: RequestHost = {
  answer(state: RequestState, error: DeadlineExceededError | CancelledError): boolean {
    const reply = state.hostData as FastifyReply | undefined;
    // Undefined once the response is over (then nothing is answered).
    if (reply === undefined || reply.sent) return false;
    if (reply.raw.headersSent) {
      reply.raw.destroy(error);
      return false;
    }
    const answer = state.answerOf(error);
    quietLateReplies(reply);
    // Inside the request's context: onSend/onResponse hooks and fastify's own lines see its trace.
    state.context.run(() => reply.code(answer.statusCode).headers(answer.headers).send(answer.body));
    return true;
  },
  logger(state: RequestState): LineLogger | undefined {
    // After the response the reply is let go of (below): the logger was looked up by then.
    return (state.hostData as FastifyReply | undefined)?.request.log;
  },
  clientLeft(state: RequestState): void {
    const reply = state.hostData as FastifyReply | undefined;
    // Answered already, or taken over by someone else (a websocket): nothing of fastify's is left to run.
    if (reply === undefined || reply.sent) return;
    quietLateReplies(reply);
    // fastify then drops what the handler returns, and logs its rejection (at error level) instead of sending it to
    // the error handlers: the logger above drops it when it is the cancellation's echo. Its onRequestAbort hooks
    // run as they would without the plugin; no onResponse, as without it (no response was finished).
    reply.hijack();
  },
  releasesHostData: true,
};

/**
 * The plugin's host when its `logger` option is set: the end-of-request line goes there, not to `request.log`.
 *
 * @example
 * ```ts
 * const host = options.logger === undefined ? fastifyHost : fastifyHostLoggingTo(options.logger);
 * ```
 * @internal
 */
export function fastifyHostLoggingTo(logger: LineLogger): RequestHost {
  return { ...fastifyHost, logger: () => logger };
}
