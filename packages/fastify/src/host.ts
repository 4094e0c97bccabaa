/**
 * How fastify answers for a request whose deadline passed: through the reply (so onSend/onResponse hooks and
 * fastify's own request log still see it), and quietly afterwards.
 */
import type { CancelledError, DeadlineExceededError } from '@deadline/core';
import { findDeadlineError } from '@deadline/core';
import { monotonicNow } from '@deadline/core/internal';
import type { LineLogger } from '@deadline/server';
import { deadlineAnswer, type RequestHost, type RequestState } from '@deadline/server/internal';
import type { FastifyBaseLogger, FastifyReply } from 'fastify';

const ALREADY_SENT = 'FST_ERR_REP_ALREADY_SENT';
const PROMISE_ERRORED_AFTER_SEND = 'Promise errored, but reply.sent = true was set';

/**
 * After we answered, the handler's own late `reply.send()` and its rejection (often our own abort reaching it)
 * make fastify log a warning and an error. They say nothing new, so this reply's logger drops exactly those
 * two; everything else goes through. The child shares the parent's prototype chain, as pino's children do.
 */
function quietLateReplies(reply: FastifyReply): void {
  const log = reply.log;
  const quiet: FastifyBaseLogger = Object.create(log);
  quiet.warn = function warn(this: FastifyBaseLogger, ...args: unknown[]) {
    const first = args[0] as { err?: { code?: unknown } } | undefined;
    if (first?.err?.code === ALREADY_SENT) return;
    return (log.warn as (...a: unknown[]) => void).apply(log, args);
  } as FastifyBaseLogger['warn'];
  quiet.error = function error(this: FastifyBaseLogger, ...args: unknown[]) {
    const first = args[0] as { err?: unknown } | undefined;
    if (args[1] === PROMISE_ERRORED_AFTER_SEND && findDeadlineError(first?.err) !== undefined) return;
    return (log.error as (...a: unknown[]) => void).apply(log, args);
  } as FastifyBaseLogger['error'];
  reply.log = quiet;
}

/** @internal */
export const fastifyHost: RequestHost = {
  answer(state: RequestState, error: DeadlineExceededError | CancelledError): boolean {
    const reply = state.hostData as FastifyReply | undefined;
    // Undefined once the response is over (then nothing is answered).
    if (reply === undefined || reply.sent) return false;
    if (reply.raw.headersSent) {
      reply.raw.destroy(error);
      return false;
    }
    const answer = deadlineAnswer(error, state.budget.budgetMs, monotonicNow() - state.arrivedAt, state.options.hop);
    quietLateReplies(reply);
    // Inside the request's context: onSend/onResponse hooks and fastify's own lines see its trace.
    state.context.run(() => reply.code(answer.statusCode).headers(answer.headers).send(answer.body));
    return true;
  },
  logger(state: RequestState): LineLogger | undefined {
    // After the response the reply is let go of (below): the logger was looked up by then.
    return (state.hostData as FastifyReply | undefined)?.request.log;
  },
  releasesHostData: true,
};
